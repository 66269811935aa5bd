"""Where a decoding step's time goes, per method, from a run's records: drafting and target-forward time per
step, wall time per emitted token and tokens per step (τ), over every task and turn at one temperature.

Steps include each turn's prefill, as the run timed them. Usage:
    python scripts/figures/step_costs.py RUN_DIR [--temperature 0]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specbench.analysis.tables import labelled_rows, per_question_frame
from specbench.errors import SpecbenchError
from specbench.run.records import read_records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args()
    try:
        frame = per_question_frame(read_records(args.run_dir))
    except SpecbenchError as exc:
        sys.exit(f"step_costs: {exc}")
    frame = frame[frame["temperature"] == args.temperature]
    if frame.empty:
        sys.exit(f"step_costs: no records at T={args.temperature:g} in {args.run_dir}")
    sums = frame.groupby("method")[["steps", "new_tokens", "wall_time", "draft_time", "verify_time"]].sum()
    questions = frame.groupby(["task", "question_id"]).ngroups
    print(f"T={args.temperature:g}, {questions} questions, pooled over tasks (τ in the report is a mean of tasks)")
    print("| method | draft ms / step | forward ms / step | wall ms / token | tokens / step |")
    print("| --- | --- | --- | --- | --- |")
    for method, row in labelled_rows(sums, frame).iterrows():  # vanilla first; lossy methods labelled
        print(f"| {method} | {1000 * row.draft_time / row.steps:.1f} | {1000 * row.verify_time / row.steps:.1f} | "
              f"{1000 * row.wall_time / row.new_tokens:.1f} | {row.new_tokens / row.steps:.2f} |")


if __name__ == "__main__":
    main()
