"""The host's work per decode step at two revisions, side by side (issue 62's "measure b57aa9c the same way"): the
older revision is checked out as a git worktree under a temporary folder (reused when it is already there; remove
it with `git worktree remove --force DIR`), and each revision runs scripts/figures/overhead_probe.py (this
checkout's: the same instrument for both) in a subprocess with its own tree first on PYTHONPATH, so each imports its
own specbench through the public API. Rounds alternate (old, new, old, new, ...) so that a change of the machine's
load hits both alike; each cell's figure is the fastest of its rounds, and the host-blocking points are counted in
the first round. Prints the table and writes OUT/table.md, OUT/results.json (every round's probe output) and
OUT/README.md (the command and the setting).
Usage: python scripts/figures/overhead_side_by_side.py [--old b57aa9c] [--new REV (default: the working tree)]
       [--methods ...] [--batches 1,4,64] [--runtimes fast,compiled] [--rounds 3] [--max-new-tokens 16] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from specbench.decode.costs import cpu_description

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).resolve().parent / "overhead_probe.py"
TARGET = "shape:smollm2-135m-tiny"  # the default target's 30 layers at tiny width (specbench/shapes/)
METHODS = "vanilla,pld,eagle@total_tokens=16,eagle3@total_tokens=16,medusa,hydra,sps"
WORKING_TREE = "working tree"


class Refused(Exception):
    """Bad input or a failed step: one line for the user."""


@dataclass
class Revision:
    label: str  # "old" or "new"
    name: str  # as given (or "working tree")
    commit: str  # full hash; the working tree's HEAD, "+ uncommitted changes" where it has them
    root: Path
    added: list[str]  # files the driver added to its checkout (the target's shape where the revision lacks it)


@dataclass
class Row:
    """One cell of the side-by-side table (None where a revision has no figure for it)."""
    runtime: str
    method: str
    batch: int
    old_ms: float | None
    new_ms: float | None
    ratio: float | None  # new / old
    old_waits: float | None
    new_waits: float | None
    old_steps: int | None
    new_steps: int | None
    same_tokens: bool | None  # both revisions emitted the same tokens and accept lengths


def git(*args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise Refused(f"git {' '.join(args)}: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
    return done.stdout.strip()


def checkout(name: str, label: str) -> Revision:
    """The revision's tree: this checkout for the working tree, else a worktree of the commit under the temporary
    folder (made once, reused after); the target's shape file is added to it where the commit lacks it."""
    if name == WORKING_TREE:
        dirty = " + uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
        return Revision(label, name, git("rev-parse", "HEAD") + dirty, ROOT, [])
    try:
        commit = git("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")
    except Refused:
        raise Refused(f"{name!r} is not a commit of this repository") from None
    folder = Path(tempfile.gettempdir()) / "specbench-side-by-side" / commit[:12]
    if not folder.exists():
        git("worktree", "prune")
        git("worktree", "add", "--detach", str(folder), commit)
    elif not (folder / ".git").exists() or git("rev-parse", "HEAD", cwd=folder) != commit:
        raise Refused(f"{folder} is there but is not a checkout of {commit[:12]}: remove it")
    shape = Path("specbench/shapes") / f"{TARGET.removeprefix('shape:')}.json"
    added = []
    if not (folder / shape).exists():
        if not (ROOT / shape).exists():
            raise Refused(f"{TARGET}: neither {name} nor this checkout has {shape}")
        shutil.copyfile(ROOT / shape, folder / shape)
    if git("status", "--porcelain", "--", str(shape), cwd=folder):
        added.append(str(shape))
    return Revision(label, name, commit, folder, added)


def run_probe(revision: Revision, args: argparse.Namespace, waits: bool) -> dict:
    """One round of the probe on a revision's tree, in a subprocess (its JSON)."""
    command = [sys.executable, str(PROBE), "--target", TARGET, "--runtimes", args.runtimes, "--methods",
               args.methods, "--batches", args.batches, "--max-new-tokens", str(args.max_new_tokens),
               *(["--waits"] if waits else [])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(revision.root),
                                                                     os.environ.get("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as scratch:  # nothing a revision writes lands in a tree
        done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise Refused(f"the probe failed on {revision.label} ({revision.name}): {last}")
    result = json.loads(done.stdout)
    if Path(result["tree"]) != revision.root.resolve() or not result["methods_folder"].startswith(result["tree"]):
        raise Refused(f"the probe imported {result['tree']} (methods {result['methods_folder']}), not "
                      f"{revision.root}")
    return result


def fastest(rounds: list[dict]) -> dict[tuple[str, str, int], dict]:
    """Per (runtime, method, batch), the round with the least host time, with the wait count of the round that
    counted them and whether every round emitted the same tokens."""
    seen: dict[tuple[str, str, int], list[dict]] = {}
    for result in rounds:
        for cell in result["cells"]:
            seen.setdefault((cell["runtime"], cell["method"], cell["batch"]), []).append(cell)
    best = {}
    for key, cells in seen.items():
        best[key] = {**min(cells, key=lambda c: c["host_ms"]),
                     "waits": next((c["waits"] for c in cells if c["waits"] is not None), None),
                     "same_tokens": all(c["same_tokens"] and c["tokens"] == cells[0]["tokens"] for c in cells)}
    return best


def side_by_side(old: list[dict], new: list[dict]) -> list[Row]:
    """The table: per cell of either revision (in the order measured), host ms per step at each, new / old and the
    host-blocking points per step at each (every kind together)."""
    a, b = fastest(old), fastest(new)
    rows = []
    for key in dict.fromkeys([*a, *b]):
        x, y = a.get(key), b.get(key)
        ms = [c["host_ms"] if c else None for c in (x, y)]
        waits = [sum(c["waits"].values()) if c and c["waits"] is not None else None for c in (x, y)]
        rows.append(Row(*key, ms[0], ms[1], ms[1] / ms[0] if x and y else None, waits[0], waits[1],
                        x["steps"] if x else None, y["steps"] if y else None,
                        x["same_tokens"] and y["same_tokens"] and x["tokens"] == y["tokens"] if x and y else None))
    return rows


def table_markdown(rows: list[Row], old: Revision, new: Revision) -> str:
    names = {"runtime": "runtime", "method": "method", "batch": "B", "old_ms": f"host ms {old.name}",
             "new_ms": f"host ms {new.name}", "ratio": "new/old", "old_waits": f"waits {old.name}",
             "new_waits": f"waits {new.name}", "old_steps": "steps old", "new_steps": "steps new",
             "same_tokens": "same tokens"}
    frame = pd.DataFrame([asdict(r) for r in rows], columns=list(names), dtype=object).rename(columns=names)
    return frame.to_markdown(index=False, floatfmt=".2f", missingval="-")


def setting(old: Revision, new: Revision, args: argparse.Namespace, rounds: list[dict]) -> list[str]:
    """The setting in words: revisions, model, machine, what is measured, the methods skipped."""
    first = rounds[0]
    lines = [f"- old: {old.name} ({old.commit}), new: {new.name} ({new.commit})",
             f"- target {first['target']} ({first['layers']} layers, random weights), {first['threads']} thread, "
             f"torch {first['torch']}, {cpu_description()}",
             f"- T=0, B prompts of {first['prompt_tokens']} tokens each, {args.max_new_tokens} new tokens per row; "
             f"host ms = process CPU time per step outside forwards after the prefill, the fastest of {args.rounds} "
             "alternating rounds; waits = host-blocking points per step outside forwards (d2h + h2d + shape), "
             "counted in the first round; freed memory kept in the process (glibc mallopt) in both revisions' "
             "probes (scripts/figures/overhead_probe.py)"]
    lines += [f"- {r.label} checkout: added {', '.join(r.added)} (the target's shape, which {r.name} lacks)"
              for r in (old, new) if r.added]
    lines += [f"- skipped on {label} ({name}): {s['method']} on {s['runtime']}: {s['reason']}"
              for label, name, result in (("old", old.name, rounds[0]), ("new", new.name, rounds[1]))
              for s in result["skipped"]]
    stopped = sorted({f"{r['tree']}: {c['method']} B={c['batch']} on {c['runtime']}" for r in rounds
                      for c in r["cells"] if c["stop_reasons"] != ["length"]})
    lines += [f"- WARNING: a row stopped before its budget (a stop token), so later steps had fewer rows: {s}"
              for s in stopped]
    return lines


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--old", default="b57aa9c", help="a git revision (default b57aa9c)")
    parser.add_argument("--new", default=WORKING_TREE, help="a git revision (default: this working tree)")
    parser.add_argument("--methods", default=METHODS)
    parser.add_argument("--batches", default="1,4,64")
    parser.add_argument("--runtimes", default="fast,compiled")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per revision (fastest kept)")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "overhead-side-by-side")
    args = parser.parse_args()
    if args.rounds < 1 or args.max_new_tokens < 2:
        parser.error("--rounds must be >= 1 and --max-new-tokens >= 2")
    if not all(b.isdigit() and int(b) > 0 for b in args.batches.split(",")):
        parser.error(f"--batches: positive integers separated by commas, got {args.batches!r}")
    if not args.methods.strip(",") or not args.runtimes.strip(","):
        parser.error("--methods and --runtimes need at least one name each")
    return args


def main() -> None:
    args = parse()
    command = shlex.join(["python", "scripts/figures/overhead_side_by_side.py", *sys.argv[1:]])
    try:
        old, new = checkout(args.old, "old"), checkout(args.new, "new")
        load_before = os.getloadavg()
        rounds: list[dict] = []
        for n in range(args.rounds):
            for revision in (old, new):
                print(f"round {n + 1}/{args.rounds}: {revision.label} ({revision.name})", file=sys.stderr)
                rounds.append(run_probe(revision, args, waits=n == 0))
        load_after = os.getloadavg()
    except Refused as exc:
        sys.exit(f"overhead_side_by_side: {exc}")
    rows = side_by_side(rounds[0::2], rounds[1::2])
    load = ("- load average (1, 5, 15 min) before " + ", ".join(f"{x:.2f}" for x in load_before) + "; after "
            + ", ".join(f"{x:.2f}" for x in load_after))
    head = [*setting(old, new, args, rounds), load]
    table = table_markdown(rows, old, new)
    print("\n".join([*head, "", table]))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text("\n".join(["# Host work per step, side by side", "", *head, "", table, ""]))
    (args.out / "results.json").write_text(json.dumps({
        "command": command, "old": asdict(old) | {"root": str(old.root)}, "new": asdict(new) | {"root": str(new.root)},
        "cpu": cpu_description(), "load_before": load_before,
        "load_after": load_after, "rows": [asdict(r) for r in rows],
        "rounds": [{"revision": r.label, "probe": p} for r, p in zip([old, new] * args.rounds, rounds)]}, indent=1))
    (args.out / "README.md").write_text(
        f"# Host work per step at {old.name} and {new.name}, side by side\n\nCommand: `{command}` (from the "
        "repository root, in specbench's virtual environment).\n\nThe table and its setting: [table.md](table.md); "
        "every round's figures: [results.json](results.json). What is measured: the docstrings of "
        "scripts/figures/overhead_side_by_side.py and scripts/figures/overhead_probe.py.\n")


if __name__ == "__main__":
    main()
