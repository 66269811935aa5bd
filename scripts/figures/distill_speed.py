"""`specbench distill`'s speed, and whether two checkouts write the same conversations: run it once per checkout on
the same prompts (one after the other, nothing else running), then compare the two dataset folders.

    python scripts/figures/distill_speed.py --out A            # reply tokens/s of this checkout, features included
    (cd OTHER && python /path/to/distill_speed.py --out B)     # the same at another checkout
    python scripts/figures/distill_speed.py --compare A B      # identical conversations, per chunk
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from specbench.decode.costs import cpu_description
from specbench.decode.names import DEFAULT_TARGET
from specbench.decode.target import load_model
from specbench.errors import SpecbenchError
from specbench.train.dataset import read_dataset
from specbench.train.distill import DistillConfig, distill


def compare(a: Path, b: Path) -> int:
    (_, left), (_, right) = read_dataset(a / "data"), read_dataset(b / "data")
    same = total = 0
    for x, y in zip(left, right):
        ox, oy = x["offsets"].tolist(), y["offsets"].tolist()
        for i in range(min(len(ox), len(oy)) - 1):
            total += 1
            same += np.array_equal(x["tokens"][ox[i] : ox[i + 1]], y["tokens"][oy[i] : oy[i + 1]])
    print(f"identical conversations: {same}/{total}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/train/prompts.jsonl"))
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--reply-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--target", default=DEFAULT_TARGET)
    parser.add_argument("--out", type=Path, help="a new folder for the dataset and its features")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.out is None or args.out.exists():
        print("distill_speed: error: --out must name a new folder", file=sys.stderr)
        return 2
    cfg = DistillConfig(data=args.data, out=args.out / "data", target=args.target, max_prompts=args.prompts,
                        reply_tokens=args.reply_tokens, batch_size=args.batch_size, chunk_size=args.prompts,
                        features=args.out / "features")
    try:
        target = load_model(args.target)
        t0 = time.perf_counter()
        distill(cfg, target, progress=False)
        seconds = time.perf_counter() - t0
        tokens = int(read_dataset(cfg.out)[1][0]["reply"].sum())
    except SpecbenchError as exc:
        print(f"distill_speed: error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.prompts} prompts, up to {args.reply_tokens} reply tokens, batch {args.batch_size}, "
          f"{torch.get_num_threads()} threads, {cpu_description()}")
    print(f"{tokens} reply tokens in {seconds:.1f} s = {tokens / seconds:.1f} tok/s (features included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
