"""Each method's speedup over vanilla in two runs, on the questions both runs answered with both rows (task,
question, repeat, batch size): each ratio measured within its own run, as the report's tables compute it
(specbench.analysis.pairs.paired_speedups: total tokens / total time of the method over vanilla's, on the same
questions), and the second run's ratio over the first's. Use it to compare code versions (a slice decoded by new code
against a committed run of the old) without comparing seconds across runs.

    python scripts/speedup_same_questions.py NEW_RUN OLD_RUN [--temperature 0]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from specbench.analysis.pairs import PAIR_KEYS, paired_speedups
from specbench.analysis.tables import per_question_frame
from specbench.errors import SpecbenchError
from specbench.run.records import read_records


def run_frame(run: Path, temperature: float) -> pd.DataFrame:
    """The run's questions at one temperature, a batch size's kept apart (in the task's key)."""
    frame = per_question_frame([r for r in read_records(run) if r.temperature == temperature])
    if frame.empty or "vanilla" not in set(frame["method"]):
        raise SpecbenchError(f"{run}: no vanilla records at T={temperature:g}")
    return frame.assign(task=frame["task"] + "@B" + frame["batch_size"].astype(str))


def questions(frame: pd.DataFrame, method: str) -> set[tuple]:
    return set(frame.loc[frame["method"] == method, PAIR_KEYS].itertuples(index=False, name=None))


def same_questions_speedup(frame: pd.DataFrame, method: str, shared: set[tuple]) -> float:
    """The method's speedup over vanilla over `shared` questions only, all tasks together."""
    keep = frame[frame["method"].isin([method, "vanilla"])
                 & pd.Series(list(frame[PAIR_KEYS].itertuples(index=False, name=None)), index=frame.index).isin(shared)]
    return float(paired_speedups(keep.assign(question_id=keep["task"] + "/" + keep["question_id"], task="all"))[0][
        (method, "all")])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("new", type=Path)
    parser.add_argument("old", type=Path)
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args()
    try:
        new, old = (run_frame(p, args.temperature) for p in (args.new, args.old))
    except SpecbenchError as exc:
        print(f"speedup_same_questions: error: {exc}", file=sys.stderr)
        return 2
    print(f"{'method':80} {'new':>7} {'old':>7} {'new/old':>8} questions")
    for method in sorted(set(new["method"]) & set(old["method"]) - {"vanilla"}):
        shared = questions(new, method) & questions(new, "vanilla") & questions(old, method) & questions(old, "vanilla")
        if not shared:
            continue
        ratio = {name: same_questions_speedup(run, method, shared) for name, run in (("new", new), ("old", old))}
        print(f"{method:80} {ratio['new']:6.2f}x {ratio['old']:6.2f}x {ratio['new'] / ratio['old']:7.3f}  {len(shared)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
