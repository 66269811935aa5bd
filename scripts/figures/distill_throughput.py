"""Self-distilled data, the two ways, on the same prompts in one run: the earlier path (`train --mode self`: HF
generate in batches, then a second batched prefill for the features) against `specbench distill` (one pass, static
cache, features from the generation's own forwards). Prints reply tokens per second of each, features included.

    python scripts/figures/distill_throughput.py --prompts 64 --reply-tokens 128
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from specbench.decode.costs import cpu_description
from specbench.decode.names import DEFAULT_TARGET
from specbench.decode.target import load_model
from specbench.errors import SpecbenchError
from specbench.train.distill import DistillConfig, distill
from specbench.train.features import ExtractConfig, FeatureCache, extract


def reply_tokens(cache: FeatureCache) -> int:
    return sum(int(chunk["loss_mask"].sum()) for chunk in cache.load())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/train/prompts.jsonl"))
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--reply-tokens", type=int, default=128)
    parser.add_argument("--old-batch-size", type=int, default=16, help="the earlier path's batch (as shipped)")
    parser.add_argument("--batch-size", type=int, default=64, help="distill's batch")
    parser.add_argument("--target", default=DEFAULT_TARGET)
    args = parser.parse_args()
    try:
        target = load_model(args.target)
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            old = extract(ExtractConfig(data=args.data, out=Path(tmp) / "old", target=args.target, mode="self",
                                        max_prompts=args.prompts, batch_size=args.old_batch_size,
                                        reply_tokens=args.reply_tokens), target)
            old_seconds = time.perf_counter() - t0
            t0 = time.perf_counter()
            distill(DistillConfig(data=args.data, out=Path(tmp) / "new", target=args.target,
                                  max_prompts=args.prompts, reply_tokens=args.reply_tokens,
                                  batch_size=args.batch_size, features=Path(tmp) / "new-features"), target)
            new_seconds = time.perf_counter() - t0
            old_tokens, new_tokens = reply_tokens(old), reply_tokens(FeatureCache(Path(tmp) / "new-features"))
    except SpecbenchError as exc:
        print(f"distill_throughput: error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.prompts} prompts, up to {args.reply_tokens} reply tokens, {cpu_description()}")
    print(f"earlier path (generate batch {args.old_batch_size}, then prefill): {old_tokens} reply tokens in "
          f"{old_seconds:.0f} s = {old_tokens / old_seconds:.1f} tok/s")
    print(f"distill (batch {args.batch_size}, one pass): {new_tokens} reply tokens in {new_seconds:.0f} s = "
          f"{new_tokens / new_seconds:.1f} tok/s")
    print(f"ratio: {(new_tokens / new_seconds) / (old_tokens / old_seconds):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
