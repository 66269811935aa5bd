"""How `specbench distill` batches its decoding, measured: the same prompts answered in one run with the loop as
first shipped (a static cache sized for the longest reply from the start, finished rows dropped once half the
batch had finished, batches cut by count alone) and as it runs now (the cache grown by blocks, rows dropped at 7/8,
long prompts batched apart). Prints reply tokens per second of each, features included, and whether the replies
are identical (none of these settings may change one).

    python scripts/figures/distill_batching.py --prompts 96 --reply-tokens 256 --threads 1
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from specbench.decode.costs import cpu_description
from specbench.decode.target import DEFAULT_TARGET, load_model
from specbench.errors import SpecbenchError
from specbench.train.dataset import read_dataset
from specbench.train.distill import DistillConfig, distill


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/train/prompts.jsonl"))
    parser.add_argument("--prompts", type=int, default=96)
    parser.add_argument("--reply-tokens", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    parser.add_argument("--target", default=DEFAULT_TARGET)
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    now = DistillConfig(data=args.data, out=Path(), target=args.target, max_prompts=args.prompts,
                        reply_tokens=args.reply_tokens, batch_size=args.batch_size, chunk_size=args.prompts)
    first = dataclasses.replace(now, cache_block=args.reply_tokens + 1, compact_share=0.5,
                                split_length_ratio=float("inf"))
    figures, replies = {}, {}
    try:
        target = load_model(args.target)
        with tempfile.TemporaryDirectory() as tmp:
            for name, cfg in (("as first shipped", first), ("now", now)):
                folder = Path(tmp) / name.replace(" ", "-")
                cfg = dataclasses.replace(cfg, out=folder / "data", features=folder / "features")
                t0 = time.perf_counter()
                distill(cfg, target, progress=False)
                seconds = time.perf_counter() - t0
                chunk = read_dataset(cfg.out)[1][0]
                replies[name] = chunk["tokens"]
                figures[name] = (int(chunk["reply"].sum()), seconds)
    except SpecbenchError as exc:
        print(f"distill_batching: error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.prompts} prompts, up to {args.reply_tokens} reply tokens, batch {args.batch_size}, "
          f"{torch.get_num_threads()} threads, {cpu_description()}")
    for name, (tokens, seconds) in figures.items():
        print(f"{name}: {tokens} reply tokens in {seconds:.0f} s = {tokens / seconds:.1f} tok/s")
    (old_tokens, old_seconds), (new_tokens, new_seconds) = figures.values()
    print(f"ratio: {(new_tokens / new_seconds) / (old_tokens / old_seconds):.2f}x; identical conversations: "
          f"{np.array_equal(*replies.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
