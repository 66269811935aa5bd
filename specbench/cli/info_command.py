"""`list`, `doctor`, `bench` and `costs`: what is installed, what the engine costs on this machine, and the
costs stored for it."""
from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from specbench.cli.args import (
    add_method_file,
    add_model_args,
    add_question_args,
    check_threads,
    csv_list,
    model_runtime,
    parse_batch_sizes,
    question_selection,
)
from specbench.decode.names import DEFAULT_TARGET
from specbench.errors import SpecbenchError


def add_list_parser(sub: argparse._SubParsersAction) -> None:
    listing = sub.add_parser("list", help="methods and tasks; with METHOD, that method's options",
        epilog="example: python -m specbench list eagle (or list --method-file my_method.py)")
    listing.add_argument("method", nargs="?", help="a method: its options (type, default, what they do)")
    add_method_file(listing)


def cmd_list(args: argparse.Namespace) -> int:
    from specbench.decode.names import shape_names
    from specbench.run.registry import REFERENCES, available_methods, select_methods
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


def add_costs_parser(sub: argparse._SubParsersAction) -> None:
    costs = sub.add_parser(
        "costs", help="this machine's stored costs (the verification curve runs size trees from): show, or "
                      "measure anew and replace",
        description="show: every stored cost curve (~/.cache/specbench/costs/, or $SPECBENCH_CACHE/costs), with the "
                    "machine it is for and when, how and under what load it was measured. refresh: measure the "
                    "curve of --target (with --device, --dtype, --runtime and --threads as a run on an idle machine "
                    "uses) anew and replace the stored one; a curve that fails its checks replaces nothing (exit 2).",
        epilog="example: python -m specbench costs refresh --target smollm2-135m-instruct")
    costs.add_argument("action", choices=["show", "refresh"])
    add_model_args(costs)
    costs.add_argument("--threads", type=int, help="torch threads (default as an idle run: OMP_NUM_THREADS when "
                                                   "set, else the cores this process may use)")


def cmd_costs(args: argparse.Namespace) -> int:
    from specbench.run.cost_store import cost_store, describe_costs, stored_costs
    from specbench.run.kernel_store import rule_store, stored_rules

    check_threads(args.threads)
    if args.action == "show":
        print("\n".join(stored_rules() or [f"no kernel rule in {rule_store()} (the first load of a target on the "
                                            "few-token kernels measures one)"]))
        found = stored_costs()
        for path, machine, costs in found:
            print("\n".join(describe_costs(path, machine, costs)))
        if not found:
            print(f"no stored costs in {cost_store()} (the first idle run of a target measures them)")
        for kept in sorted(cost_store().glob("*.samples.json")):
            print(f"{kept}: the samples of an unfinished measurement (the next run or refresh of its machine resumes "
                  "from them)")
        return 0
    import torch

    from specbench.run.cost_store import refresh_costs
    from specbench.run.decoder import Decoder
    from specbench.run.load import decoding_threads
    from specbench.run.plan import RunConfig

    torch.set_num_threads(decoding_threads(args.threads, busy=False))  # the threads an idle run decodes with
    # The Decoder reads the model settings only (no run folder: `out` is not written).
    decoder = Decoder(RunConfig(out=cost_store(), target=args.target, device=args.device, dtype=args.dtype,
                                runtime=model_runtime(args)), {})
    machine = decoder.machine()
    old, new = refresh_costs(machine, decoder.measure_costs)
    print("stored before:" if old else "stored before: none")
    if old:
        print("\n".join(describe_costs(machine.path(), asdict(machine), old)))
    print("stored now:")
    print("\n".join(describe_costs(machine.path(), asdict(machine), new)))
    return 0


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
                       help="the host's work per decode step outside the forwards (process CPU ms) and its "
                            "host-blocking points, per method, batch size and runtime, on --target's shape (default "
                            "shape:smollm2-135m-tiny: the default target's depth at tiny width), on each cache "
                            "graphs choice (off and on) unless --kernels, --graphs or --runtime name one; "
                            "docs/measuring.md")
    bench.add_argument("--methods", type=csv_list, help="--overhead: the methods (default vanilla, pld, "
                                                        "eagle@total_tokens=16, eagle3@total_tokens=16, medusa, hydra, "
                                                        "sps)")
    bench.add_argument("--batch-size", type=parse_batch_sizes, help="--overhead: batch sizes (default 1,4,64)")
    bench.add_argument("--threads", type=int, help="torch CPU threads (default: 1 with --overhead, torch's own else)")
    bench.add_argument("--out", type=Path, help="--overhead: also write the table as DIR/overhead.md and the cells as "
                                                "DIR/overhead.json")
    bench.add_argument("--remake", type=Path, metavar="DIR", help="--overhead: rewrite DIR/overhead.md from "
                                                                  "DIR/overhead.json (nothing is measured)")
    # --max-new-tokens: 128, or 32 with --overhead; --target and the runtime: their defaults, or --overhead's
    bench.set_defaults(limit=2, target=None)


def overhead_command(args: argparse.Namespace, tokens: int, methods: list[str], batches: tuple[int, ...],
                     threads: int) -> str:
    """The command that remakes an --overhead table, every setting spelled out (the prompt: the first question of
    the selection)."""
    given = [(flag, getattr(args, name)) for flag, name in (("--kernels", "kernels"), ("--graphs", "graphs"),
             ("--runtime", "runtime_name"), ("--suite", "suite"), ("--question-dir", "question_dir"))]
    return (f"python -m specbench bench --overhead --target {args.target} --methods {','.join(methods)} "
            f"--batch-size {','.join(map(str, batches))} --max-new-tokens {tokens} --rounds {args.rounds} "
            f"--threads {threads} --tasks {','.join(args.tasks)}"
            + "".join(f" {flag} {value}" for flag, value in given if value)
            + (f" --device {args.device}" if args.device != "auto" else ""))


def remake_overhead(folder: Path) -> int:
    """DIR/overhead.md rewritten from DIR/overhead.json, printed."""
    import json

    from specbench.measure.overhead import overhead_markdown, overhead_table, read_overhead

    source = folder / "overhead.json"
    try:
        records = json.loads(source.read_text())
        rows, setting, command = read_overhead(records), records["setting"], records["command"]
    except FileNotFoundError:
        raise SpecbenchError(f"--remake {folder}: no overhead.json there") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise SpecbenchError(f"--remake {folder}: {source} is not bench --overhead's records ({exc})") from None
    (folder / "overhead.md").write_text(overhead_markdown(rows, setting, command))
    print(setting)
    print(overhead_table(rows))
    print(f"report: {folder / 'overhead.md'}")
    return 0


def cmd_overhead(args: argparse.Namespace, tokens: int) -> int:
    import json

    import torch

    from specbench.decode.target import chat_tokens
    from specbench.measure.overhead import (
        OVERHEAD_BATCHES,
        OVERHEAD_METHODS,
        OVERHEAD_RUNTIMES,
        OVERHEAD_TARGET,
        keep_freed_memory,
        overhead_benchmark,
        overhead_header,
        overhead_line,
        overhead_markdown,
        overhead_records,
        overhead_summary,
        overhead_table,
    )
    from specbench.run.kernel_rule import load_target
    from specbench.run.registry import select_methods
    from specbench.run.tasks import resolve_questions

    names = args.methods or list(OVERHEAD_METHODS)
    methods = select_methods(names)
    batches = tuple(args.batch_size or OVERHEAD_BATCHES)
    if any(b <= 0 for b in batches):
        raise SpecbenchError(f"--batch-size must be > 0, got {','.join(map(str, batches))}")
    chosen = model_runtime(args, given_only=True)
    runtimes = (chosen,) if chosen else OVERHEAD_RUNTIMES
    threads = args.threads or 1
    torch.set_num_threads(threads)
    args.target = args.target or OVERHEAD_TARGET
    questions = [q for _, qs in resolve_questions(question_selection(args)) for q in qs]
    targets = [load_target(args.target, args.device, args.dtype, runtime) for runtime in runtimes]
    kept_memory = targets[0].model.device.type == "cpu" and keep_freed_memory()
    prompt = chat_tokens(targets[0].tokenizer, [{"role": "user", "content": questions[0].turns[0]}])
    header = overhead_header(targets[0], len(prompt), tokens, args.rounds, kept_memory)
    print(header)
    print(overhead_table([]))
    rows = overhead_benchmark(iter(targets), methods, prompt, batches, tokens, args.rounds,
                              lambda cell: print(overhead_line(cell), flush=True))
    print("\n".join(overhead_summary(rows)))
    if args.out:
        command = overhead_command(args, tokens, names, batches, threads)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "overhead.md").write_text(overhead_markdown(rows, header, command))
        (args.out / "overhead.json").write_text(json.dumps(overhead_records(rows, header, command), indent=1))
        print(f"report: {args.out / 'overhead.md'}, {args.out / 'overhead.json'}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import json

    import torch

    from specbench.decode.target import chat_tokens
    from specbench.measure.bench import benchmark, cost_benchmark, format_costs
    from specbench.run.kernel_rule import load_target
    from specbench.run.kernel_store import rule_record
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
    if args.threads is not None and args.threads < 1:
        raise SpecbenchError(f"--threads must be >= 1, got {args.threads}")
    overhead_only = [f"--{n.replace('_', '-')}" for n in ("methods", "batch_size", "out", "remake")
                     if getattr(args, n)]
    if overhead_only and not args.overhead:
        raise SpecbenchError(f"{overhead_only[0]} goes with --overhead")
    if args.overhead:
        return remake_overhead(args.remake) if args.remake else cmd_overhead(args, tokens)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.target, runtime = args.target or DEFAULT_TARGET, model_runtime(args)
    if args.cost:
        target = load_target(args.target, args.device, args.dtype, runtime)
        result = {**cost_benchmark(target, rounds=args.rounds), **rule_record(target.runtime)}
        print(format_costs(result))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result, indent=1))
            print(f"json: {args.json}")
        return 0
    questions = [q for _, qs in resolve_questions(question_selection(args)) for q in qs]
    target = load_target(args.target, args.device, args.dtype, runtime)
    prompts = [chat_tokens(target.tokenizer, [{"role": "user", "content": q.turns[0]}]) for q in questions]
    print(f"{len(prompts)} prompts, {tokens} new tokens, target {args.target} on {target.model.device}")
    for key, value in rule_record(target.runtime).items():
        print(f"{key.replace('_', ' ')}: {value}")
    print(benchmark(target, prompts, tokens))
    return 0
