"""EAGLE-3 training steps per second, the two ways, on the same batches in one run: features from a target forward
per batch (the earlier path) against the cache's fused layers (`add_layer_features`, added here first when the
cache lacks them). Prints training positions per second of each and their ratio, with the machine.

    python scripts/figures/eagle3_train_throughput.py --features results/features/smollm2-self-t0 --batches 12
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

from specbench.decode.costs import cpu_description
from specbench.decode.names import DEFAULT_TARGET
from specbench.decode.target import load_model
from specbench.errors import SpecbenchError
from specbench.methods.eagle3.checkpoint import head_config
from specbench.methods.eagle3.head import Eagle3Head, fused_layers
from specbench.methods.eagle3.training import Eagle3Trainable, set_draft_vocabulary
from specbench.train.features import FeatureCache, add_layer_features
from specbench.train.training import Batch, Trainable, epoch_batches, load_conversations, make_batch


def timed_steps(trainable: Trainable, optimizer: torch.optim.Optimizer,
                batches: list[Batch]) -> tuple[int, float, float]:
    """One optimizer step per batch: (training positions, seconds in the steps, the last loss)."""
    positions, seconds, loss = 0, 0.0, torch.zeros(())
    for batch in batches:
        t0 = time.perf_counter()
        loss, _ = trainable.loss(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        seconds += time.perf_counter() - t0
        positions += int(batch.valid.sum())
    return positions, seconds, float(loss.detach())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=Path, required=True, help="a feature cache of the target")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--draft-vocab", type=int, default=8192)
    parser.add_argument("--target", default=DEFAULT_TARGET)
    args = parser.parse_args()
    try:
        target = load_model(args.target)
        cache = FeatureCache(args.features)
        layers = fused_layers(target.model.config.num_hidden_layers)
        add_layer_features(cache, target, layers)
        convs = load_conversations(cache)
        batches = epoch_batches([len(t) for t in convs.tokens], list(range(len(convs))), args.batch_tokens, 0)
        batches = [make_batch(convs, b) for b in batches[: args.batches]]
    except SpecbenchError as exc:
        print(f"eagle3_train_throughput: error: {exc}", file=sys.stderr)
        return 2
    vocab = target.model.config.vocab_size
    head = Eagle3Head(head_config(target.model.config, args.draft_vocab))
    set_draft_vocabulary(head, torch.arange(args.draft_vocab))  # which ids does not change the cost
    trainable = Eagle3Trainable(head, target.model)
    optimizer = torch.optim.AdamW(head.parameters(), lr=1e-4)
    rates = {}
    for name, use_cache in (("target forward", False), ("cached layers", True), ("target forward ", False)):
        run = batches if use_cache else [dataclasses.replace(b, fused=None, fused_layers=()) for b in batches]
        positions, seconds, _ = timed_steps(trainable, optimizer, run)
        rates.setdefault(name.strip(), []).append(positions / seconds)
        print(f"{name.strip():<15} {positions} positions in {seconds:.1f} s: {positions / seconds:.0f} positions/s")
    ratio = rates["cached layers"][0] / (sum(rates["target forward"]) / len(rates["target forward"]))
    print(f"cached / target forward (mean of the runs before and after) = {ratio:.2f}x; {cpu_description()}; "
          f"{torch.get_num_threads()} threads; target vocab {vocab}, draft vocab {args.draft_vocab}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
