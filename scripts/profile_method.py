"""cProfile of one method decoding a few questions at T=0: where a step's time goes (target GEMMs, draft head, ...).

A diagnostic, not a benchmark: run it on an idle machine and read the shares, not the absolute times. Usage:
    python scripts/profile_method.py [--method eagle] [--task alpaca] [--limit 3] [--max-new-tokens 128]
        [--question-dir ../shared/data/tasks] [--target NAME] [--lines 35]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

from specbench.decode.engine import generate
from specbench.decode.names import DEFAULT_TARGET
from specbench.decode.sampling import Sampling
from specbench.decode.target import chat_tokens, load_model
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.run.registry import available_methods, select_methods
from specbench.run.tasks import load_questions, select_tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="eagle")
    parser.add_argument("--task", default="alpaca")
    parser.add_argument("--limit", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--question-dir", type=Path, default=Path("../shared/data/tasks"))
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--lines", type=int, default=35)
    args = parser.parse_args()
    try:
        method, task = select_methods([args.method])[0], select_tasks([args.task])[0]
        target = load_model(args.target)
        drafter = method.drafter(BuildContext(target=target, methods=available_methods()))
        questions = load_questions(task, "auto", args.question_dir, args.limit)
    except SpecbenchError as exc:
        sys.exit(f"profile_method: {exc}")
    prompts = [chat_tokens(target.tokenizer, [{"role": "user", "content": q.turns[0]}]) for q in questions]
    generate(target.model, prompts[0], drafter, Sampling(), 16, target.stop_ids)  # warm-up, not profiled
    profile = cProfile.Profile()
    profile.enable()
    generations = [generate(target.model, p, drafter, Sampling(), args.max_new_tokens, target.stop_ids) for p in prompts]
    profile.disable()
    tokens = sum(len(g.token_ids) for g in generations)
    steps = sum(len(g.accept_lengths) for g in generations)
    wall = sum(g.wall_time for g in generations)
    draft = sum(sum(g.draft_times) for g in generations)
    verify = sum(sum(g.verify_times) for g in generations)
    print(f"{args.method}: {tokens} tokens in {steps} steps (τ {tokens / steps:.2f}); wall {wall:.2f} s, "
          f"draft {draft / wall:.0%}, verify {verify / wall:.0%} (profiled, so slower than a run)")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.lines)


if __name__ == "__main__":
    main()
