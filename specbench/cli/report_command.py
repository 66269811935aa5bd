"""`report`, `export` and `check`: reading a run folder (check also loads the target, for margins, or samples it with --sampled)."""
from __future__ import annotations

import argparse
from pathlib import Path

from specbench.cli.args import (
    add_method_file,
    add_model_args,
    add_question_args,
    csv_list,
    parse_options,
    question_selection,
)
from specbench.errors import SpecbenchError


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    report = sub.add_parser("report", help="speedup and τ tables from a run directory",
        epilog="example: python -m specbench report results/mine --report-dir reports/mine; "
               "python -m specbench report --verify reports/fair/T0; python -m specbench report --check-prose .")
    report.add_argument("run_dir", type=Path, help="a run folder (with --verify: a report folder)")
    report.add_argument("--report-dir", "--out", dest="report_dir", type=Path, help="default RUN_DIR/report")
    report.add_argument("--no-plots", action="store_true", help="the tables only")
    report.add_argument("--slo-tpot-ms", type=float, metavar="MS",
                        help="also goodput tables: turns (batch rows) whose time per output token is within MS ms, "
                             "and their tokens/s")
    report.add_argument("--verify", action="store_true",
                        help="remake the tables of the report folder RUN_DIR from the records its made_from.json "
                             "names and exit 1 if any differs from the committed ones (one line per file)")
    report.add_argument("--fix", action="store_true", help="--verify: write the remade tables over the committed")
    report.add_argument("--check-prose", action="store_true",
                        help="check that every figure of the page RUN_DIR (or of a checkout's README.md, "
                             "docs/results.md and reports/*/README.md) is found in a source its block names "
                             "(<!-- src: FILE -->); exit 1 with one line per figure that is not")


def cmd_report(args: argparse.Namespace) -> int:
    from specbench.analysis.report import build_report

    if args.fix and not args.verify:
        raise SpecbenchError("report --fix goes with --verify DIR")
    if args.check_prose:
        if args.verify:
            raise SpecbenchError("report: --check-prose and --verify are two checks; run them one at a time")
        from specbench.analysis.prose import check_prose_command

        return check_prose_command(args.run_dir)
    if args.verify:
        from specbench.analysis.verify import verify_command

        return verify_command(args.run_dir, fix=args.fix)
    out = args.report_dir or args.run_dir / "report"
    if args.slo_tpot_ms is not None and not args.slo_tpot_ms > 0:
        raise SpecbenchError(f"--slo-tpot-ms must be a positive number of milliseconds, not {args.slo_tpot_ms:g}")
    print(build_report(args.run_dir, out, plots=not args.no_plots, slo_tpot_ms=args.slo_tpot_ms))
    print(f"\ntables: {out}")
    return 0


def add_export_parser(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser("export", help="answer files of a run in another harness's format (spec-bench: one "
                                           "JSONL per method and temperature that Spec-Bench's speed.py reads)",
        epilog="example: python -m specbench export results/mine --format spec-bench")
    export.add_argument("run_dir", type=Path)
    export.add_argument("--format", default="spec-bench", help="spec-bench (the only one yet)")
    export.add_argument("--out", type=Path, help="default RUN_DIR/report/spec-bench")


def cmd_export(args: argparse.Namespace) -> int:
    from specbench.analysis.export import export_run

    out = args.out or args.run_dir / "report" / args.format
    print(export_run(args.run_dir, args.format, out))
    return 0


def add_check_parser(sub: argparse._SubParsersAction) -> None:
    check = sub.add_parser("check", help="equivalence: T=0 token identity in a run (RUN_DIR), or --sampled: the "
                                         "T>0 distribution of each method's first tokens against vanilla's",
        epilog="example: python -m specbench check results/mine; or: python -m specbench check --sampled --methods eagle,sps --samples 300")
    check.add_argument("run_dir", type=Path, nargs="?", help="a run directory (T=0 check)")
    check.add_argument("--against", type=Path, metavar="OTHER_RUN",
                       help="compare with another run of the same settings instead: the same token ids and accept "
                            "lengths, record by record, at every temperature (e.g. an idle and a loaded run)")
    check.add_argument("--no-margins", action="store_true",
                       help="T=0: do not load the target to measure its logit margin where a method diverges")
    check.add_argument("--sampled", action="store_true", help="run the T>0 two-sample test suite on the target")
    check.add_argument("--methods", type=csv_list, help="--sampled: methods to compare with vanilla; --against: "
                       "only these methods' records (e.g. vanilla across two runtimes)")
    add_question_args(check, max_new_tokens=False)
    check.set_defaults(limit=1)  # --sampled: prompts per task
    check.add_argument("--samples", type=int, default=300, help="--sampled: samples per prompt per method")
    check.add_argument("--tokens", type=int, default=3, help="--sampled: tokens per sample (the positions tested)")
    check.add_argument("--temperature", type=float, default=1.0)
    check.add_argument("--top-p", type=float, default=1.0)
    check.add_argument("--top-k", type=int, default=0)
    check.add_argument("--alpha", type=float, default=0.01, help="--sampled: family-wise level per method")
    check.add_argument("--draft")
    check.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE")
    check.add_argument("--seed", type=int, default=0)
    add_method_file(check)
    check.add_argument("--out", type=Path, help="--sampled: where the table goes (default results/sampled-check-T<t>)")
    add_model_args(check)


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

        summary, ok = compare_runs(args.run_dir, args.against, args.methods)
    else:
        summary, ok = check_run(args.run_dir, margins=not args.no_margins)
    print(summary)
    return 0 if ok else 1
