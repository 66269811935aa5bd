"""`list`, `doctor` and `bench`: what is installed, and what the engine costs on this machine."""
from __future__ import annotations

import argparse
from pathlib import Path

from specbench.cli.args import (
    add_method_file,
    add_model_args,
    add_question_args,
    question_selection,
)
from specbench.errors import SpecbenchError


def add_list_parser(sub: argparse._SubParsersAction) -> None:
    listing = sub.add_parser("list", help="methods and tasks; with METHOD, that method's options",
        epilog="example: python -m specbench list eagle (or list --method-file my_method.py)")
    listing.add_argument("method", nargs="?", help="a method: its options (type, default, what they do)")
    add_method_file(listing)


def cmd_list(args: argparse.Namespace) -> int:
    from specbench.decode.shapes import shape_names
    from specbench.run.reference import REFERENCES
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
    print("reference rows (run --reference NAME[,NAME]; not methods: the decoders the methods are compared with):")
    for name, description in REFERENCES.items():
        print(f"  {name:<16} {description}")
    for suite, tasks in suites().items():
        print(f"tasks of --suite {suite}{' (the default)' if suite == DEFAULT_SUITE else ''}:")
        for t in tasks:
            print(f"  {t.name:<18} {t.description} (default {t.max_new_tokens} new tokens)")
    print("TIMING-ONLY modes (any method; check, tune and the fair comparison refuse them):")
    print("  run --synthetic-acceptance RATES   accept along each draft's best path at fixed per-position rates")
    print("  run --synthetic-acceptance FILE    ... at the rates of a speculation_profile.json (report's profiles/)")
    print(f"  --target shape:NAME                random weights of a real shape: {', '.join(shape_names())}")
    return 0


def add_doctor_parser(sub: argparse._SubParsersAction) -> None:
    doctor = sub.add_parser("doctor", help="check the install: versions, device, CPU flags, targets, shipped drafters",
                            epilog="example: python -m specbench doctor")
    add_method_file(doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    from specbench.cli.doctor import doctor

    return doctor(args.method_files)


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="our vanilla and pld against HF generate, interleaved; --cost: the target's "
                                         "forward cost over k tokens, stock HF against the engine's runtime",
        epilog="example: python -m specbench bench --overhead")
    add_question_args(bench)
    add_model_args(bench)
    bench.add_argument("--cost", action="store_true", help="T(k) for k = 1..32 and the machine's floors")
    bench.add_argument("--json", type=Path, help="--cost: also write the figures to this JSON file "
                                                 "(usable as run --cost-curve)")
    bench.add_argument("--rounds", type=int, default=3, help="--cost: rounds over all sizes; a cell is the fastest "
                                                             "of all rounds (default 3); --overhead: generations per "
                                                             "cell, the fastest kept")
    bench.add_argument("--overhead", action="store_true",
                       help="the engine's own time per step (all but the target forward and the drafter) at tree "
                            "sizes 1, 16, 64 and batch sizes 1, 8, at T=0 and T=1 (--max-new-tokens per row, "
                            "default 32 here)")
    bench.set_defaults(limit=2)  # --max-new-tokens: 128, or 32 with --overhead


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
