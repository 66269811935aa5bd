"""`specbench tasks download DIR`: the six evaluation sets as question files that `--question-dir DIR` reads."""
from __future__ import annotations

import argparse
from pathlib import Path

from specbench.errors import SpecbenchError


def add_tasks_parser(sub: argparse._SubParsersAction) -> None:
    tasks = sub.add_parser(
        "tasks", help="download the six evaluation sets (80 questions each) as question files for --question-dir",
        description="Writes DIR/<task>/question.jsonl for the six tasks of the EAGLE paper. --from eagle (default): "
                    "the EAGLE repository's files (SafeAILab/EAGLE, eagle/data) at a pinned commit, SHA-256 "
                    "checked, the questions of every committed report; --from hf: the first --limit rows of each "
                    "task's HF dataset (tasks/*.yaml), other questions. Without them, runs use the embedded samples.",
        epilog="example: python -m specbench tasks download data/tasks")
    tasks.add_argument("action", choices=["download"])
    tasks.add_argument("dir", type=Path, metavar="DIR", help="where the question files go (DIR/<task>/question.jsonl)")
    tasks.add_argument("--from", dest="source", choices=["eagle", "hf"], default="eagle",
                       help="eagle: the EAGLE repository's 80-question files (default); hf: the tasks' HF datasets")
    tasks.add_argument("--limit", type=int, help="--from hf: the first N rows of each dataset (default 80)")


def cmd_tasks(args: argparse.Namespace) -> int:
    from specbench.run.question_sets import HF_QUESTIONS, download

    if args.limit is not None and args.source != "hf":
        raise SpecbenchError("--limit goes with --from hf (EAGLE's files are used whole)")
    for path in download(args.dir, args.source, args.limit or HF_QUESTIONS):
        print(path)
    print(f"questions: {args.dir} (use with --question-dir {args.dir})")
    return 0
