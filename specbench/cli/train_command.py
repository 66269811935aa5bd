"""`train`, `distill` and `datastore`: what trained and retrieval methods are built from."""
from __future__ import annotations

import argparse
from pathlib import Path

from specbench.cli.args import (
    add_method_file,
    add_model_args,
    model_runtime,
    parse_layers,
    parse_options,
    parse_shard,
)
from specbench.decode.names import DEFAULT_TARGET
from specbench.errors import SpecbenchError
from specbench.train.names import AUTOCAST_NAMES


def add_feature_layers(p: argparse.ArgumentParser, which: str, so: str) -> None:
    p.add_argument("--feature-layers", default="",
                   help=f"{which} also keep the hidden states at these output_hidden_states indices, concatenated "
                        f"(EAGLE-3's fused features: 2,15,27 on the 30-layer default target), so that `train eagle3` "
                        f"{so}")


def add_train_parser(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train", help="extract target features (cached, resumable) and train a drafter",
        epilog="example: python -m specbench train hydra --dataset heads/data/smollm2-135m-instruct/self-t0 --dataset-chunks 11 --max-tokens 640000 --out results/heads/hydra")
    train.add_argument("method", help="what to train: eagle, eagle3, medusa, hydra, sps-draft (and TRAINERS of "
                                      "--method-file)")
    add_method_file(train)
    train.add_argument("--data", type=Path, default=Path("../shared/data/train/prompts.jsonl"),
                       help="training prompts, JSONL with turns and reference (default ../shared/data/train/prompts.jsonl)")
    train.add_argument("--features", type=Path, help="feature cache dir (default results/features/<target>-<mode>, "
                                                     "or results/features/<dataset folder name> with --dataset)")
    train.add_argument("--dataset", type=Path, help="train on a self-distilled dataset (specbench distill) instead "
                                                    "of --data/--mode; its features are rebuilt when missing")
    add_feature_layers(train, "with --dataset: features rebuilt here", "needs no second prefill")
    train.add_argument("--dataset-chunks", type=int, metavar="K",
                       help="with --dataset: its first K chunks only (default all), a fixed share of a dataset that "
                            "is still growing, so heads trained at different times see the same data")
    train.add_argument("--mode", choices=["fixed", "self"], default="fixed",
                       help="replies: the prompts' references (fixed) or the target's own greedy replies (self)")
    train.add_argument("--prompts", type=int, default=4096, help="conversations to extract features for")
    train.add_argument("--max-len", type=int, default=512, help="tokens per conversation")
    train.add_argument("--batch-size", type=int, default=8,
                       help="conversations per target forward while extracting (self mode: also per generate call)")
    train.add_argument("--out", type=Path, help="where the trained weights, log and checkpoint go")
    train.add_argument("--features-only", action="store_true",
                       help="build (or complete) the feature cache and stop, no --out: then train several drafters "
                            "from it at once")
    train.add_argument("--max-tokens", type=int, default=2_000_000, help="training positions to stop after")
    train.add_argument("--hours", type=float, default=0.0, help="training time to stop after (0 = no limit)")
    train.add_argument("--autocast", choices=AUTOCAST_NAMES,
                       help="mixed precision: each step's loss under torch.autocast (weights, optimizer and held-out "
                            "evaluation stay fp32); on a CPU it pays only with native bf16 (avx512_bf16 or AMX)")
    train.add_argument("--lr", type=float, default=3e-4)
    train.add_argument("--batch-tokens", type=int, default=4096)
    train.add_argument("--eval-every", type=int, default=200, help="steps between held-out evaluations")
    train.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                       help="method option, e.g. --opt inputs=token (repeatable)")
    train.add_argument("--objective", help="training objective, for the methods that have more than one: eagle takes "
                                           "eagle (its default) or hass (HASS: top-K distillation and context "
                                           "alignment; --opt steps=3 --opt top_k=10 --opt top_k_weight=1.0), which "
                                           "trains the head eagle-hass decodes with")
    train.add_argument("--snapshot-tokens", type=int, default=0,
                       help="also save the weights every N training positions under OUT/snapshots/ (0 = never)")
    train.add_argument("--seed", type=int, default=0)
    add_model_args(train)


def objective_option(method: str, objective: str, options: dict[str, str],
                     objectives: dict[str, tuple[str, ...]]) -> str:
    """--objective NAME, checked against what `method`'s trainer declares (before the target loads)."""
    if method not in objectives:
        raise SpecbenchError(f"train {method} has one training objective: --objective goes with "
                             f"{', '.join(objectives) or 'no method here'}")
    if objective not in objectives[method]:
        raise SpecbenchError(f"--objective {objective}: train {method} takes {', '.join(objectives[method])}")
    if options.get("objective", objective) != objective:
        raise SpecbenchError(f"--objective {objective} and --opt objective={options['objective']} disagree")
    return objective


def cmd_train(args: argparse.Namespace) -> int:
    from specbench.run.kernel_rule import load_target
    from specbench.run.registry import available_objectives, available_trainers
    from specbench.train.dataset import features_from_dataset
    from specbench.train.features import ExtractConfig, extract
    from specbench.train.training import TrainConfig

    trainers = available_trainers(args.method_files)
    if args.method not in trainers:
        raise SpecbenchError(f"nothing to train called {args.method!r}; valid: {', '.join(trainers)}")
    options = parse_options(args.opt)
    if args.objective is not None:
        options["objective"] = objective_option(args.method, args.objective, options,
                                                available_objectives(args.method_files))
    if args.prompts <= 0 or args.max_tokens <= 0 or args.max_len < 2 or args.batch_size <= 0:
        raise SpecbenchError("--prompts, --max-tokens and --batch-size must be > 0 and --max-len >= 2")
    feature_layers = parse_layers(args.feature_layers)
    if args.dataset is None and (args.dataset_chunks is not None or feature_layers):
        raise SpecbenchError("--dataset-chunks and --feature-layers go with --dataset")
    if (args.out is None) != args.features_only:
        raise SpecbenchError("train needs --out (where the weights go), or --features-only without it")
    target = load_target(args.target, args.device, args.dtype, model_runtime(args))
    if args.dataset is not None:
        features = args.features or Path("results/features") / args.dataset.resolve().name
        cache = features_from_dataset(args.dataset, features, target, args.batch_size, args.dataset_chunks,
                                      feature_layers)
    else:
        features = args.features or Path("results/features") / f"{Path(args.target).name.lower()}-{args.mode}"
        cache = extract(ExtractConfig(data=args.data, out=features, target=args.target, mode=args.mode,
                                      max_prompts=args.prompts, max_len=args.max_len, batch_size=args.batch_size,
                                      seed=args.seed), target)
    if args.features_only:
        print(f"features: {features}")
        return 0
    cfg = TrainConfig(out=args.out, lr=args.lr, batch_tokens=args.batch_tokens, max_tokens=args.max_tokens,
                      max_hours=args.hours, eval_every=args.eval_every, snapshot_tokens=args.snapshot_tokens,
                      autocast=args.autocast, options=tuple(sorted(options.items())),
                      seed=args.seed)
    result = trainers[args.method](target, cache, cfg, options)
    print("held-out: " + " ".join(f"{k}={v:.4f}" for k, v in result.items()))
    print(f"trained weights: {args.out}")
    return 0


def add_distill_parser(sub: argparse._SubParsersAction) -> None:
    distill = sub.add_parser("distill", help="self-distilled training data: the target answers training prompts in "
                                             "large batches; conversations (token ids) and, optionally, features",
        epilog="example: python -m specbench distill --prompts 256 --out results/data/self-t0")
    distill.add_argument("--data", type=Path, default=Path("../shared/data/train/prompts.jsonl"),
                         help="training prompts, JSONL with id and turns")
    distill.add_argument("--out", type=Path, required=True, help="dataset folder (manifest.json + chunk_*.npz)")
    distill.add_argument("--features", type=Path, help="also write the features of every conversation here, from "
                                                       "the generation's own forwards (a feature cache for train)")
    add_feature_layers(distill, "with --features: the features written", "runs no target forward")
    distill.add_argument("--prompts", type=int, default=17146, help="a shuffled prefix of the prompts file")
    distill.add_argument("--reply-tokens", type=int, default=256)
    distill.add_argument("--temperature", type=float, default=0.0, help="0 = greedy replies")
    distill.add_argument("--second-turn-share", type=float, default=0.0,
                         help="fraction of conversations that get a generic follow-up turn and a second reply")
    distill.add_argument("--batch-size", type=int, default=32, help="rows decoded at once")
    distill.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    distill.add_argument("--shard", default="0/1",
                         help="I/N: answer only the chunks whose index is I modulo N, so that N processes (e.g. one "
                              "per CPU core, --threads 1) fill one dataset together; the chunks are the same")
    distill.add_argument("--chunk-size", type=int, default=256, help="conversations per chunk file")
    distill.add_argument("--seed", type=int, default=0)
    add_model_args(distill)


def cmd_distill(args: argparse.Namespace) -> int:
    import torch

    from specbench.run.kernel_rule import load_target
    from specbench.train.distill import DistillConfig, distill

    if args.prompts <= 0:
        raise SpecbenchError(f"--prompts must be > 0, got {args.prompts}")
    feature_layers = parse_layers(args.feature_layers)
    if feature_layers and args.features is None:
        raise SpecbenchError("--feature-layers goes with --features")
    shard = parse_shard(args.shard)
    if args.chunk_size <= 0:
        raise SpecbenchError(f"--chunk-size must be > 0, got {args.chunk_size}")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    target = load_target(args.target, args.device, args.dtype, model_runtime(args))
    cfg = DistillConfig(data=args.data, out=args.out, target=args.target, max_prompts=args.prompts,
                        reply_tokens=args.reply_tokens, temperature=args.temperature,
                        second_turn_share=args.second_turn_share, batch_size=args.batch_size, seed=args.seed,
                        features=args.features, feature_layers=feature_layers, shard=shard,
                        chunk_size=args.chunk_size)
    figures = distill(cfg, target)
    print(f"generated {figures['generated_tokens']} reply tokens in {figures['seconds']:.0f} s "
          f"({figures['tokens_per_second']:.1f} tok/s, prompts' prefill included); dataset: {args.out}")
    return 0


def add_datastore_parser(sub: argparse._SubParsersAction) -> None:
    datastore = sub.add_parser("datastore", help="build the retrieval datastore of the methods that draft from one "
                                                 "(rest, samd)",
        epilog="example: python -m specbench datastore build")
    datastore.add_argument("action", choices=["build"])
    datastore.add_argument("--target", default=DEFAULT_TARGET)
    datastore.add_argument("--data", type=Path, default=Path("../shared/data/train/prompts.jsonl"),
                           help="training prompts whose reference replies go in (default "
                                "../shared/data/train/prompts.jsonl); the target's shipped self-distilled replies "
                                "go in too")


def cmd_datastore(args: argparse.Namespace) -> int:
    from specbench.run.registry import available_datastores

    for method, build in available_datastores().items():
        print(f"{method}: datastore in {build(args.target, args.data)}")
    return 0
