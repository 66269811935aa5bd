"""EAGLE-3 training positions per second of this checkout's trainer against another version of
methods/eagle3/training.py, on the same batches in one run (alternated: other, this, other, this), from the cache's
fused layers. Prints each run, the ratio of the means, and the losses (equal when the two compute the same loss).

    git show 04fb160:methods/eagle3/training.py > /tmp/training_04fb160.py
    python scripts/figures/eagle3_trainer_versions.py --features FEATURES --other /tmp/training_04fb160.py --threads 1
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import torch
from eagle3_train_throughput import timed_steps  # this folder (the script's own) is on sys.path

from specbench.decode.costs import cpu_description
from specbench.decode.names import DEFAULT_TARGET
from specbench.decode.target import LoadedModel, load_model
from specbench.errors import SpecbenchError
from specbench.methods.eagle3 import training as this_training
from specbench.methods.eagle3.checkpoint import head_config
from specbench.methods.eagle3.head import Eagle3Head, fused_layers
from specbench.train.features import FeatureCache
from specbench.train.training import AUTOCAST_TYPES, Batch, autocast_type, epoch_batches, load_conversations, make_batch


def load_trainer(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("other_eagle3_training", path)
    if spec is None or spec.loader is None:
        raise SpecbenchError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def positions_per_second(trainer: ModuleType, target: LoadedModel, batches: list[Batch], vocab: int,
                         autocast: torch.dtype | None) -> tuple[float, float]:
    """(positions/s, last loss) of a fresh head (seed 0) trained on the batches, under autocast when given (as
    `train --autocast` runs the loss)."""
    torch.manual_seed(0)
    head = Eagle3Head(head_config(target.model.config, vocab))
    trainer.set_draft_vocabulary(head, torch.arange(vocab))  # which ids does not change the cost
    trainable = trainer.Eagle3Trainable(head, target.model)
    optimizer = torch.optim.AdamW(head.parameters(), lr=1e-4)
    with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
        positions, seconds, loss = timed_steps(trainable, optimizer, batches)
    return positions / seconds, loss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=Path, required=True, help="a feature cache holding the fused layers")
    parser.add_argument("--other", type=Path, required=True, help="another version of methods/eagle3/training.py")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--batch-tokens", type=int, default=2048)
    parser.add_argument("--draft-vocab", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    parser.add_argument("--autocast", choices=sorted(AUTOCAST_TYPES), help="mixed precision, as `train --autocast`")
    parser.add_argument("--target", default=DEFAULT_TARGET)
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        other = load_trainer(args.other)
        target = load_model(args.target)
        layers = fused_layers(target.model.config.num_hidden_layers)
        convs = load_conversations(FeatureCache(args.features))
        batches = epoch_batches([len(t) for t in convs.tokens], list(range(len(convs))), args.batch_tokens, 0)
        batches = [make_batch(convs, b) for b in batches[: args.batches]]
        if any(b.fused is None or b.fused_layers != layers for b in batches):
            raise SpecbenchError(f"{args.features} lacks the fused layers {layers} (`specbench distill "
                                 "--feature-layers` or `train eagle3` add them)")
    except (SpecbenchError, OSError) as exc:
        print(f"eagle3_trainer_versions: error: {exc}", file=sys.stderr)
        return 2
    rates: dict[str, list[float]] = {"other": [], "this": []}
    for name, trainer in (("other", other), ("this", this_training)) * 2:
        rate, loss = positions_per_second(trainer, target, batches, args.draft_vocab, autocast_type(args.autocast))
        rates[name].append(rate)
        print(f"{name:<5} ({Path(trainer.__file__).name}): {rate:.0f} positions/s, loss after "
              f"{len(batches)} batches {loss:.4f}")
    mean = {name: sum(r) / len(r) for name, r in rates.items()}
    print(f"this / other = {mean['this'] / mean['other']:.2f}x; {cpu_description()}; {torch.get_num_threads()} "
          f"threads; {sum(int(b.valid.sum()) for b in batches)} positions per run, batches of "
          f"{args.batch_tokens} tokens, draft vocab {args.draft_vocab}, autocast {args.autocast or 'off'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
