"""Each method's speedup over vanilla in two runs, on the questions both runs answered: total vanilla time over total
method time per run (each ratio measured within its own run), and the second run's ratio over the first's. Use it
to compare code versions (a slice decoded by new code against a committed run of the old) without comparing
seconds across runs.

    python scripts/speedup_same_questions.py NEW_RUN OLD_RUN [--temperature 0]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.run.record import Record
from specbench.run.records import read_records


def turn_times(records: list[Record], temperature: float) -> dict[str, dict[tuple, float]]:
    """Per method: wall seconds of every turn, keyed by task, question, repeat, batch size and turn."""
    times: dict[str, dict[tuple, float]] = {}
    for r in records:
        if r.temperature != temperature:
            continue
        for turn, seconds in enumerate(r.choice.wall_time):
            times.setdefault(r.method, {})[(r.task, str(r.question_id), r.repeat, r.batch_size, turn)] = seconds
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("new", type=Path)
    parser.add_argument("old", type=Path)
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args()
    try:
        new, old = (turn_times(read_records(p), args.temperature) for p in (args.new, args.old))
    except SpecbenchError as exc:
        print(f"speedup_same_questions: error: {exc}", file=sys.stderr)
        return 2
    if "vanilla" not in new or "vanilla" not in old:
        print("speedup_same_questions: error: both runs need vanilla records", file=sys.stderr)
        return 2
    print(f"{'method':80} {'new':>7} {'old':>7} {'new/old':>8} turns")
    for method in sorted(set(new) & set(old) - {"vanilla"}):
        turns = set(new[method]) & set(old[method]) & set(new["vanilla"]) & set(old["vanilla"])
        if not turns:
            continue
        ratio = {name: sum(run["vanilla"][t] for t in turns) / sum(run[method][t] for t in turns)
                 for name, run in (("new", new), ("old", old))}
        print(f"{method:80} {ratio['new']:6.2f}x {ratio['old']:6.2f}x {ratio['new'] / ratio['old']:7.3f}  {len(turns)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
