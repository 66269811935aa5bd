"""Held-out curves of trained heads from their log.jsonl: a Markdown table and a plot to paste into a paper.

Every head's trainer appends one line per held-out evaluation to OUT/log.jsonl (positions seen, hours, held-out
losses and top-1). Usage:
    python scripts/figures/training_curves.py HEAD_FOLDER [HEAD_FOLDER ...] [--label NAME ...] [--at 2e6,4e6]
        [--metric heldout_top1] [--plot curves.png]
The table gives, for each head, the evaluation nearest each position of --at (default: every evaluation of the
first head), so heads logged at slightly different positions are read at about the same point.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_log(folder: Path) -> list[dict]:
    path = folder / "log.jsonl"
    if not path.is_file():
        raise SystemExit(f"{folder} has no log.jsonl (not a trained head's folder?)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def value_at(evals: list[dict], positions: float, metric: str) -> float | None:
    """The metric at the evaluation nearest `positions` training positions (None if there is none, or if the head
    stopped training well before `positions`)."""
    if not evals or positions > 1.05 * evals[-1]["tokens"]:
        return None
    return min(evals, key=lambda row: abs(row["tokens"] - positions))[metric]


def positions_label(positions: float) -> str:
    return f"{positions / 1e6:.2f}M".replace(".00M", "M")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("heads", type=Path, nargs="+")
    parser.add_argument("--label", action="append", default=[], help="one per head, in order (default: folder name)")
    parser.add_argument("--at", help="comma-separated training positions for the table, e.g. 2e6,4e6,12e6")
    parser.add_argument("--metric", default="heldout_top1")
    parser.add_argument("--plot", type=Path, help="also save the curves (png, pdf, svg: by the suffix)")
    args = parser.parse_args()
    if args.label and len(args.label) != len(args.heads):
        raise SystemExit(f"--label given {len(args.label)} times for {len(args.heads)} heads")
    labels = args.label or [folder.name for folder in args.heads]
    # each head's evaluations that logged the metric (step 0 included)
    logs = [[row for row in read_log(folder) if args.metric in row] for folder in args.heads]
    if not any(logs):
        raise SystemExit(f"no log has the metric {args.metric!r}")
    try:
        points = [float(x) for x in args.at.split(",")] if args.at else \
            [row["tokens"] for row in logs[0] if row["tokens"] > 0]
    except ValueError:
        raise SystemExit(f"--at takes comma-separated numbers, got {args.at!r}") from None
    print(f"| head ({args.metric}) | " + " | ".join(positions_label(p) for p in points) + " |")
    print("| --- |" + " --- |" * len(points))
    for label, evals in zip(labels, logs):
        values = [value_at(evals, p, args.metric) for p in points]
        print(f"| {label} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in values) + " |")
    if args.plot:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for label, evals in zip(labels, logs):
            curve = [(row["tokens"] / 1e6, row[args.metric]) for row in evals if row["tokens"] > 0]
            ax.plot(*zip(*curve), marker=".", label=label)
        ax.set_xlabel("training positions (millions)")
        ax.set_ylabel(args.metric.replace("_", " "))
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=150)
        print(f"saved {args.plot}")


if __name__ == "__main__":
    main()
