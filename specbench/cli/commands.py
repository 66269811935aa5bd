"""What each command does with its parsed arguments; the heavy imports happen inside, so `list` and `--help`
stay fast."""
from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

from specbench.cli.parser import parse_batch_sizes, parse_layers, parse_options, parse_shard, question_selection
from specbench.cli.tasks_command import cmd_tasks
from specbench.errors import SpecbenchError


def cmd_run(args: argparse.Namespace) -> int:
    from specbench.analysis.report import build_report, check_report_dir
    from specbench.run.plan import RunConfig
    from specbench.run.records import read_run_info
    from specbench.run.runner import run

    out = args.out or Path("results") / datetime.now().strftime("%Y%m%d-%H%M%S")
    report_dir = args.report_dir or out / "report"
    if args.threads is not None and args.threads < 1:
        raise SpecbenchError(f"--threads must be >= 1, got {args.threads}")
    check_report_dir(report_dir, read_run_info(out).get("started"))  # before hours of decoding, not after
    methods = args.methods
    if args.settings is not None:
        from specbench.run.settings import apply_settings, read_settings

        methods = apply_settings(methods, args.temperatures, read_settings(args.settings), args.settings)
    cfg = RunConfig(
        out=out, methods=methods, settings_file=args.settings, method_files=args.method_files, questions=question_selection(args), baseline=not args.no_baseline,
        temperatures=args.temperatures, top_p=args.top_p, top_k=args.top_k, max_new_tokens=args.max_new_tokens,
        target=args.target, draft=args.draft, options=parse_options(args.opt),
        seed=args.seed, repeats=args.repeats, device=args.device, dtype=args.dtype, runtime=args.runtime,
        cost_curve=args.cost_curve, measure_costs=args.measure_costs, threads=args.threads, workers=args.workers,
        ray_address=args.ray_address,
        batch_sizes=parse_batch_sizes(args.batch_size),
    )
    if cfg.method_names() != cfg.methods:
        print("vanilla is not among --methods: it runs as the baseline, interleaved like the others "
              "(--no-baseline skips it)", file=sys.stderr)
    run(cfg)
    print(build_report(out, report_dir))
    print(f"\nrecords: {out}\ntables:  {report_dir}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from specbench.measure.tune import TuneConfig, summary, tune
    from specbench.run.plan import RunConfig

    cfg = RunConfig(
        out=args.out, methods=args.methods, questions=question_selection(args), temperatures=args.temperatures,
        max_new_tokens=args.max_new_tokens, target=args.target, draft=args.draft, options=parse_options(args.opt),
        seed=args.seed, device=args.device, dtype=args.dtype, runtime=args.runtime, cost_curve=args.cost_curve,
        method_files=args.method_files)
    settings_file = args.settings_file or args.out / "settings.yaml"
    print(summary(tune(TuneConfig(cfg, settings_file))))
    print(f"settings: {settings_file} (apply with run --settings {settings_file})")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from specbench.analysis.report import build_report

    if args.fix and not args.verify:
        raise SpecbenchError("report --fix goes with --verify DIR")
    if args.verify:
        from specbench.analysis.verify import verify_command

        return verify_command(args.run_dir, fix=args.fix)
    out = args.report_dir or args.run_dir / "report"
    print(build_report(args.run_dir, out, plots=not args.no_plots))
    print(f"\ntables: {out}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from specbench.analysis.export import export_run

    out = args.out or args.run_dir / "report" / args.format
    print(export_run(args.run_dir, args.format, out))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from specbench.measure.check import check_run

    if args.sampled:
        from specbench.measure.equivalence import SampledCheckConfig, run_sampled_check

        if not args.methods:
            raise SpecbenchError("check --sampled needs --methods")
        out = args.out or Path("results") / f"sampled-check-T{args.temperature:g}"
        summary, ok = run_sampled_check(SampledCheckConfig(
            methods=args.methods, out=out, questions=question_selection(args), samples=args.samples,
            tokens=args.tokens, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, alpha=args.alpha,
            target=args.target, draft=args.draft, method_files=args.method_files,
            options=parse_options(args.opt), device=args.device, dtype=args.dtype, seed=args.seed))
        print(summary)
        print(f"table: {out / 'sampled_check.md'}")
        return 0 if ok else 1
    if args.run_dir is None:
        raise SpecbenchError("check needs a RUN_DIR (T=0 identity) or --sampled --methods ... (T>0 test)")
    if args.against is not None:
        from specbench.measure.check import compare_runs

        summary, ok = compare_runs(args.run_dir, args.against)
    else:
        summary, ok = check_run(args.run_dir, margins=not args.no_margins)
    print(summary)
    return 0 if ok else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    from specbench.cli.doctor import doctor

    return doctor(args.method_files)


def cmd_list(args: argparse.Namespace) -> int:
    from specbench.run.registry import available_methods, select_methods
    from specbench.run.tasks import DEFAULT_SUITE, suites

    if args.method:
        m = select_methods([args.method], args.method_files)[0]
        print(f"{m.name} ({'lossless' if m.lossless else 'LOSSY'}): {m.description}")
        print("options (method@key=value:key=value, or --opt key=value):" if m.options else "options: none")
        for option in m.options:
            print(f"  {option.describe()}")
        if m.tuning:
            print(f"tune tries: {', '.join(o or '(defaults)' for o in m.tuning)}")
        return 0
    print("methods:")
    for m in available_methods(args.method_files).values():
        print(f"  {m.name:<16} {'lossless' if m.lossless else 'LOSSY':<9} {m.description}")
        if m.options:
            print(f"  {'':<16} {'':<9} options: {', '.join(o.name for o in m.options)} (list {m.name}: what they do)")
        if m.tuning:
            print(f"  {'':<16} {'':<9} tune tries: {', '.join(o or '(defaults)' for o in m.tuning)}")
    for suite, tasks in suites().items():
        print(f"tasks of --suite {suite}{' (the default)' if suite == DEFAULT_SUITE else ''}:")
        for t in tasks:
            print(f"  {t.name:<18} {t.description} (default {t.max_new_tokens} new tokens)")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from specbench.decode.target import load_model
    from specbench.run.registry import available_trainers
    from specbench.train.dataset import features_from_dataset
    from specbench.train.features import ExtractConfig, extract
    from specbench.train.training import TrainConfig

    trainers = available_trainers(args.method_files)
    if args.method not in trainers:
        raise SpecbenchError(f"nothing to train called {args.method!r}; valid: {', '.join(trainers)}")
    if args.prompts <= 0 or args.max_tokens <= 0 or args.max_len < 2 or args.batch_size <= 0:
        raise SpecbenchError("--prompts, --max-tokens and --batch-size must be > 0 and --max-len >= 2")
    feature_layers = parse_layers(args.feature_layers)
    if args.dataset is None and (args.dataset_chunks is not None or feature_layers):
        raise SpecbenchError("--dataset-chunks and --feature-layers go with --dataset")
    if (args.out is None) != args.features_only:
        raise SpecbenchError("train needs --out (where the weights go), or --features-only without it")
    target = load_model(args.target, args.device, args.dtype, args.runtime)
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
                      autocast=args.autocast,
                      seed=args.seed)
    result = trainers[args.method](target, cache, cfg, parse_options(args.opt))
    print("held-out: " + " ".join(f"{k}={v:.4f}" for k, v in result.items()))
    print(f"trained weights: {args.out}")
    return 0


def cmd_datastore(args: argparse.Namespace) -> int:
    from specbench.run.registry import available_datastores

    for method, build in available_datastores().items():
        print(f"{method}: datastore in {build(args.target, args.data)}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import json

    from specbench.decode.target import chat_prompt, load_model
    from specbench.measure.bench import benchmark, cost_benchmark, format_costs
    from specbench.measure.overhead import format_overhead, overhead_benchmark
    from specbench.run.tasks import resolve_questions

    tokens = args.max_new_tokens or (32 if args.overhead else 128)
    if tokens <= 0:
        raise SpecbenchError(f"--max-new-tokens must be > 0, got {tokens}")
    if args.json and not args.cost:
        raise SpecbenchError("--json goes with --cost")
    if args.cost and args.overhead:
        raise SpecbenchError("--cost and --overhead are two benchmarks: run them one at a time")
    if args.rounds <= 0:
        raise SpecbenchError(f"--rounds must be > 0, got {args.rounds}")
    if args.cost:
        target = load_model(args.target, args.device, args.dtype, args.runtime)
        result = cost_benchmark(target, rounds=args.rounds)
        print(format_costs(result))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=1))
            print(f"json: {args.json}")
        return 0
    questions = [q for _, qs in resolve_questions(question_selection(args)) for q in qs]
    target = load_model(args.target, args.device, args.dtype, args.runtime)
    prompts = [chat_prompt(target.tokenizer, [{"role": "user", "content": q.turns[0]}]) for q in questions]
    if args.overhead:
        print(format_overhead(target, overhead_benchmark(target, prompts[0], tokens, args.rounds), tokens, args.rounds))
        return 0
    print(f"{len(prompts)} prompts, {tokens} new tokens, target {args.target} on {target.model.device}")
    print(benchmark(target, prompts, tokens))
    return 0

def cmd_distill(args: argparse.Namespace) -> int:
    import torch

    from specbench.decode.target import load_model
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
    target = load_model(args.target, args.device, args.dtype, args.runtime)
    cfg = DistillConfig(data=args.data, out=args.out, target=args.target, max_prompts=args.prompts,
                        reply_tokens=args.reply_tokens, temperature=args.temperature,
                        second_turn_share=args.second_turn_share, batch_size=args.batch_size, seed=args.seed,
                        features=args.features, feature_layers=feature_layers, shard=shard,
                        chunk_size=args.chunk_size)
    figures = distill(cfg, target)
    print(f"generated {figures['generated_tokens']} reply tokens in {figures['seconds']:.0f} s "
          f"({figures['tokens_per_second']:.1f} tok/s, prompts' prefill included); dataset: {args.out}")
    return 0


COMMANDS = {"run": cmd_run, "distill": cmd_distill, "report": cmd_report, "export": cmd_export, "check": cmd_check,
            "list": cmd_list, "bench": cmd_bench, "train": cmd_train, "datastore": cmd_datastore, "tune": cmd_tune,
            "doctor": cmd_doctor, "tasks": cmd_tasks}
