"""Wall time of the same run in one process and on N Ray workers, side by side (issue: distributed sweeps).

    python scripts/figures/ray_scaling.py --workers 2                      # the tiny-model test run (a random Llama)
    python scripts/figures/ray_scaling.py --workers 2 --target smollm2-135m-instruct --methods vanilla,pld --limit 3

Each run is a fresh `python -m specbench run` process, timed from start to exit (model loading, Ray start-up and
worker start-up included: what a user waits for). Prints both wall times, their ratio, the CPU, and whether the
token ids of the two runs are identical.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from specbench.decode.costs import cpu_description  # noqa: E402
from specbench.run.records import read_records  # noqa: E402


def timed_run(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "specbench", "run", *args], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def decoding_seconds(out: Path) -> float:
    """From the start of the first answer to the end of the last one (records keep when each answer finished)."""
    records = read_records(out)
    starts = [r.tstamp - sum(r.choice.wall_time) for r in records]
    return max(r.tstamp for r in records) - min(starts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--target", help="default: a tiny random Llama built here (the tests' model)")
    parser.add_argument("--methods", default="vanilla,pld,lookahead")
    parser.add_argument("--tasks", default="mt_bench,gsm8k,humaneval,alpaca")
    parser.add_argument("--limit", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperatures", default="0,1")
    parser.add_argument("--repeats", type=int, default=1, help="decode every question N times (a longer run)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = args.target
        if target is None:
            from tests.conftest import save_tiny_target

            target = str(save_tiny_target(root / "tiny", 300, seed=1))
        common = ["--target", target, "--methods", args.methods, "--tasks", args.tasks, "--limit", str(args.limit),
                  "--max-new-tokens", str(args.max_new_tokens), "--temperatures", args.temperatures,
                  "--repeats", str(args.repeats)]
        one = timed_run([*common, "--out", str(root / "one"), "--report-dir", str(root / "r1")])
        many = timed_run([*common, "--out", str(root / "many"), "--report-dir", str(root / "r2"),
                          "--workers", str(args.workers), "--cost-curve", str(root / "one" / "run.json")])
        tokens = lambda out: {r.key(): r.choice.token_ids for r in read_records(out)}  # noqa: E731
        same = tokens(root / "one") == tokens(root / "many")
        records = len(read_records(root / "one"))
        decode_one, decode_many = decoding_seconds(root / "one"), decoding_seconds(root / "many")
    print(f"cpu: {cpu_description()}")
    print(f"target: {args.target or 'tiny random Llama (2 layers, hidden 32, vocab 300)'}; methods {args.methods}; "
          f"tasks {args.tasks}; {args.limit} questions each; {args.max_new_tokens} new tokens; T={args.temperatures}; "
          f"{records} records")
    print(f"whole command: one process {one:.1f} s; {args.workers} Ray workers {many:.1f} s; ratio {many / one:.2f}")
    print(f"decoding alone (first record's start to last record's end): one process {decode_one:.1f} s; "
          f"{args.workers} Ray workers {decode_many:.1f} s; ratio {decode_many / decode_one:.2f}")
    print(f"token ids identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
