"""Every lossless method's token ids and accept lengths at two revisions, on the default target at T=0 in fp32, one
batch of three prompts, on each runtime (issue 62's "the same accept lengths as before the change on a fixed tree
size"): each revision runs scripts/figures/accept_probe.py (this checkout's) in a subprocess with its own tree first
on PYTHONPATH (the older one checked out as a git worktree under a temporary folder, as overhead_side_by_side.py
does). The table says, per runtime and method, whether each revision emits vanilla's token ids, and whether the new
revision's token ids and accept lengths equal the old one's, row for row; it exits 1 when any does not.
Usage: python scripts/figures/accept_before_after.py [--old 532dcc8] [--new REV (default: the working tree)]
       [--methods ...] [--runtimes fast,compiled] [--max-new-tokens 48] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead_side_by_side import WORKING_TREE, Refused, Revision, checkout  # noqa: E402  (a script beside this one)

PROBE = Path(__file__).resolve().parent / "accept_probe.py"
# Every lossless method that needs no file of the user's; the dynamic trees at a fixed size (auto would size them
# from each run's measured costs).
METHODS = ("vanilla,eagle@total_tokens=12,eagle1,eagle3@total_tokens=12,medusa,hydra,sps,pld,lookahead,swift,"
           "recycling,samd,suffix,rest")


def run_probe(revision: Revision, runtime: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, str(PROBE), "--runtime", runtime, "--methods", args.methods, "--max-new-tokens",
               str(args.max_new_tokens)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(revision.root),
                                                                     os.environ.get("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise Refused(f"the probe failed on {revision.label} ({revision.name}), runtime {runtime}: {last}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(result["tree"]) != revision.root.resolve():
        raise Refused(f"the probe imported {result['tree']}, not {revision.root}")
    return result


def compare(old: dict, new: dict) -> list[dict]:
    """One line per method: each revision's identity with its own vanilla, and new against old, row for row."""
    lines = []
    for method, new_rows in new["methods"].items():
        old_rows = old["methods"][method]
        lines.append({
            "method": method,
            "old_is_vanilla": all(r["token_ids"] == v["token_ids"] for r, v in zip(old_rows, old["methods"]["vanilla"])),
            "new_is_vanilla": all(r["token_ids"] == v["token_ids"] for r, v in zip(new_rows, new["methods"]["vanilla"])),
            "same_ids": all(a["token_ids"] == b["token_ids"] for a, b in zip(old_rows, new_rows)),
            "same_accepts": all(a["accept_lengths"] == b["accept_lengths"] for a, b in zip(old_rows, new_rows)),
            "tau": [round(len(r["token_ids"]) / len(r["accept_lengths"]), 2) for r in new_rows],
        })
    return lines


def table(by_runtime: dict[str, list[dict]]) -> str:
    yes = {True: "yes", False: "**NO**"}
    out = ["| runtime | method | old = vanilla | new = vanilla | ids old = new | accept lengths old = new | tau (new) |",
           "|---|---|---|---|---|---|---|"]
    for runtime, lines in by_runtime.items():
        out += [f"| {runtime} | {x['method']} | {yes[x['old_is_vanilla']]} | {yes[x['new_is_vanilla']]} | "
                f"{yes[x['same_ids']]} | {yes[x['same_accepts']]} | {', '.join(map(str, x['tau']))} |" for x in lines]
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="532dcc8")
    parser.add_argument("--new", default=WORKING_TREE)
    parser.add_argument("--methods", default=METHODS)
    parser.add_argument("--runtimes", default="fast,compiled")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    try:
        old, new = checkout(args.old, "old"), checkout(args.new, "new")
        results = {runtime: (run_probe(old, runtime, args), run_probe(new, runtime, args))
                   for runtime in args.runtimes.split(",")}
    except Refused as exc:
        sys.exit(f"accept_before_after: {exc}")
    by_runtime = {runtime: compare(*pair) for runtime, pair in results.items()}
    text = (f"old: {old.name} ({old.commit}); new: {new.name} ({new.commit}); target smollm2-135m-instruct, fp32, "
            f"T=0, a batch of 3 prompts, {args.max_new_tokens} new tokens\n\n" + table(by_runtime))
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "table.md").write_text(text)
        (args.out / "results.json").write_text(json.dumps({r: {"old": o, "new": n} for r, (o, n) in results.items()}))
    failed = any(not all(x[k] for k in ("old_is_vanilla", "new_is_vanilla", "same_ids", "same_accepts"))
                 for lines in by_runtime.values() for x in lines)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
