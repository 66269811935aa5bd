"""Mixed precision against fp32 for a drafter's training, in one run: the same head (same seed, same batches, same
schedule) trained twice on a feature cache, in fp32 and with `--autocast`. Prints training positions per second
and held-out top-1 of each (held-out evaluation runs in fp32 in both).

    python scripts/figures/autocast_training.py eagle --features DIR --max-tokens 300000 --threads 1
    python scripts/figures/autocast_training.py eagle3 --features DIR --max-tokens 30000 --threads 1
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from specbench.decode.costs import cpu_description
from specbench.decode.names import DEFAULT_TARGET
from specbench.decode.target import load_model
from specbench.errors import SpecbenchError
from specbench.run.registry import available_trainers
from specbench.train.features import FeatureCache
from specbench.train.training import AUTOCAST_TYPES, TrainConfig


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method", help="what to train: eagle, eagle3, ...")
    parser.add_argument("--features", type=Path, required=True, help="a feature cache of the target")
    parser.add_argument("--max-tokens", type=int, default=300_000)
    parser.add_argument("--batch-tokens", type=int, default=2048)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--autocast", choices=list(AUTOCAST_TYPES), default="bfloat16")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    parser.add_argument("--target", default=DEFAULT_TARGET)
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    trainers = available_trainers()
    rows = []
    try:
        if args.method not in trainers:
            raise SpecbenchError(f"nothing to train called {args.method!r}; valid: {', '.join(trainers)}")
        target = load_model(args.target)
        cache = FeatureCache(args.features)
        with tempfile.TemporaryDirectory() as tmp:
            for precision in (None, args.autocast):
                out = Path(tmp) / (precision or "fp32")
                cfg = TrainConfig(out=out, lr=args.lr, batch_tokens=args.batch_tokens, max_tokens=args.max_tokens,
                                  eval_every=10**9, autocast=precision)
                trainers[args.method](target, cache, cfg, {})
                final = json.loads((out / "log.jsonl").read_text().splitlines()[-1])
                rows.append((precision or "fp32", final))
    except SpecbenchError as exc:
        print(f"autocast_training: error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.method}, {args.max_tokens} positions, batches of {args.batch_tokens} tokens, lr {args.lr}; "
          f"{cpu_description()}; {torch.get_num_threads()} threads")
    rates = []
    for precision, final in rows:
        rate = final["tokens"] / (final["hours"] * 3600)
        rates.append(rate)
        heldout = ", ".join(f"{k.removeprefix('heldout_')} {v:.4f}" for k, v in final.items() if k.startswith("heldout_"))
        print(f"{precision:<9} {rate:.0f} positions/s; held-out {heldout}")
    print(f"{args.autocast} / fp32 = {rates[1] / rates[0]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
