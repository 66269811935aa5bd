"""`run` and `tune`: their arguments beside what they do."""
from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from specbench.cli.args import (
    add_method_file,
    add_model_args,
    add_question_args,
    check_threads,
    csv_list,
    model_runtime,
    parse_batch_sizes,
    parse_options,
    question_selection,
    temperature_list,
)


def add_run_parser(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="decode tasks with methods and write records",
        epilog="example: python -m specbench run --methods vanilla,eagle,pld --tasks all --limit 4 --max-new-tokens 128 --temperatures 0,1 --question-dir data/tasks --out results/mine")
    run.add_argument("--methods", type=csv_list, default=["vanilla", "pld"],
                     help="comma-separated method names, each optionally with its own options, as in "
                          "eagle@total_tokens=8:top_k=3 (one row per variant: a sweep)")
    run.add_argument("--reference", type=csv_list, default=[], metavar="NAME[,NAME]",
                     help="reference rows beside the methods, timed alike on the same target: hf-compiled (HF "
                          "generate, static cache, torch.compile) and/or hf-eager (HF generate, dynamic cache); "
                          "batch size 1 only; the tables add each method's speedup over hf-compiled")
    add_question_args(run)
    run.add_argument("--temperatures", type=temperature_list, default=[0.0, 1.0], help="comma-separated, default 0,1")
    run.add_argument("--top-p", type=float, default=1.0)
    run.add_argument("--top-k", type=int, default=0)
    add_model_args(run)
    run.add_argument("--draft", help="draft model for methods that use one (sps)")
    run.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                     help="method option, e.g. --opt gamma=5 (repeatable)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--synthetic-acceptance", metavar="RATES|FILE",
                     help="TIMING ONLY: accept each draft along its best path at these conditional per-position rates "
                          "(e.g. 0.8,0.6,0.4; one rate: every position; the last repeats) instead of verifying it, "
                          "so every method runs at the same acceptance; or a speculation_profile.json (as `report` "
                          "writes into its profiles/ folder): its conditional rates replayed, per category where it "
                          "has the question's (docs/measuring.md); check refuses such runs")
    run.add_argument("--no-baseline", action="store_true",
                     help="do not add vanilla when it is not among --methods (speedups then cannot be computed)")
    run.add_argument("--repeats", type=int, default=1,
                     help="decode every question N times (methods interleaved); tables then show mean ± 95%% interval")
    run.add_argument("--out", type=Path, help="run directory (default results/<timestamp>); reuse it to resume")
    run.add_argument("--report-dir", type=Path,
                     help="where the tables go (default OUT/report); refused when it holds another run's tables")
    run.add_argument("--threads", type=int, help="torch CPU threads (default: OMP_NUM_THREADS when set, else the "
                                                 "cores this process may use, or 1 when other work holds them)")
    run.add_argument("--batch-size", default="1", metavar="B[,B...]",
                     help="decode B questions of a task at once (every method, vanilla included; one target forward "
                          "verifies every row's draft); a list (1,2,4,8) decodes each question at each size in one "
                          "run and the report adds throughput tables and speedup against B. Default 1")
    run.add_argument("--workers", type=int, default=1,
                     help="decode on N Ray workers (pip install 'specbench[distributed]'): one GPU each where the "
                          "cluster has GPUs, else the cores split between them; the driver writes every record")
    run.add_argument("--ray-address", help="join an existing Ray cluster (e.g. auto, after `ray start`); "
                                           "default: a local one started for the run")
    run.add_argument("--cost-curve", type=Path,
                     help="reuse the costs (verification curve, drafting costs) stored in a run.json or a "
                          "`bench --cost --json` file, to make another machine's cost-based choices; default: "
                          "this machine's stored costs, measured by the first run here (a resumed run reuses its own)")
    add_method_file(run)
    run.add_argument("--settings", type=Path, metavar="FILE",
                     help="apply the settings `tune` chose (per method and temperature) to the bare method names of "
                          "--methods; the run must evaluate other questions than those they were tuned on")
    run.add_argument("--measure-costs", action="store_true",
                     help="measure this machine's costs anew when the run starts (stored for later runs if the "
                          "machine is idle) instead of reusing the stored ones")
    run.add_argument("--require-graphs", action="store_true",
                     help="stop with an error where a CUDA graph capture fails (fixed shapes would otherwise "
                          "go on uncaptured, its tables marked UNCAPTURED), or where the run captures none (not "
                          "--graphs off, or no CUDA device); records finished before stay")


def cmd_run(args: argparse.Namespace) -> int:
    # Everything up to validate imports no torch: a bad argument or path is refused at once.
    from specbench.analysis.report_folder import check_report_dir
    from specbench.run.plan import RunConfig, validate
    from specbench.run.run_info import read_run_info

    out = args.out or Path("results") / datetime.now().strftime("%Y%m%d-%H%M%S")
    report_dir = args.report_dir or out / "report"
    check_threads(args.threads)
    check_report_dir(report_dir, read_run_info(out).started or None)  # before hours of decoding, not after
    methods = args.methods
    if args.settings is not None:
        from specbench.run.settings import apply_settings, read_settings

        methods = apply_settings(methods, args.temperatures, read_settings(args.settings), args.settings)
    cfg = RunConfig(
        out=out, methods=methods, references=args.reference, settings_file=args.settings, method_files=args.method_files, questions=question_selection(args), baseline=not args.no_baseline,
        temperatures=args.temperatures, top_p=args.top_p, top_k=args.top_k, max_new_tokens=args.max_new_tokens,
        target=args.target, draft=args.draft, options=parse_options(args.opt),
        seed=args.seed, repeats=args.repeats, device=args.device, dtype=args.dtype, runtime=model_runtime(args),
        cost_curve=args.cost_curve, measure_costs=args.measure_costs, threads=args.threads, workers=args.workers,
        ray_address=args.ray_address, require_graphs=args.require_graphs,
        batch_sizes=parse_batch_sizes(args.batch_size), **synthetic_settings(args.synthetic_acceptance),
    )
    checked = validate(cfg)
    if cfg.method_names() != cfg.methods:
        print("vanilla is not among --methods: it runs as the baseline, interleaved like the others "
              "(--no-baseline skips it)", file=sys.stderr)
    from specbench.analysis.report import build_report
    from specbench.run.runner import run

    run(cfg, checked)
    print(build_report(out, report_dir))
    print(f"\nrecords: {out}\ntables:  {report_dir}")
    return 0


def synthetic_settings(text: str | None) -> dict[str, Any]:
    """--synthetic-acceptance as RunConfig's synthetic (and synthetic_categories, for a profile): a file's name (an
    existing file, or a name ending in .json) is read as a speculation profile, anything else as rates (one error
    line when it is neither)."""
    if text is None:
        return {}
    from specbench.analysis.profiles import read_replay_rates
    from specbench.run.synthetic import SyntheticAcceptance

    if text.endswith(".json") or Path(text).is_file():
        replay = read_replay_rates(Path(text))
        return {"synthetic": replay.overall, "synthetic_categories": replay.categories or None}
    return {"synthetic": list(SyntheticAcceptance.parse(text).rates)}


def add_tune_parser(sub: argparse._SubParsersAction) -> None:
    tune = sub.add_parser(
        "tune", help="choose each method's settings on a development split, the same way for every method",
        description="Decodes every setting each method declares (see `list`; at most 4 per method) beside vanilla "
                    "on the last N questions of each task, and writes the fastest per method and temperature to a "
                    "settings file for `run --settings`.",
        epilog="example: python -m specbench tune --methods pld,lookahead,sps --question-dir data/tasks "
               "--dev-questions 3 --max-new-tokens 128 --temperatures 0 --out results/tune")
    tune.add_argument("--methods", type=csv_list, required=True, help="comma-separated bare method names")
    add_question_args(tune, limit=False)
    tune.add_argument("--dev-questions", type=int, default=3,
                      help="the last N questions of each task form the development split (default 3)")
    tune.add_argument("--temperatures", type=temperature_list, default=[0.0, 1.0], help="comma-separated, default 0,1")
    add_model_args(tune)
    tune.add_argument("--draft", help="draft model for methods that use one (sps)")
    tune.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE", help="method option (repeatable)")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--out", type=Path, required=True, help="run directory of the tuning decode (rerun to resume)")
    tune.add_argument("--settings-file", type=Path, help="where the settings go (default OUT/settings.yaml)")
    tune.add_argument("--cost-curve", type=Path, help="the fixed costs to tune with (as run --cost-curve)")
    add_method_file(tune)


def cmd_tune(args: argparse.Namespace) -> int:
    from specbench.measure.tune import TuneConfig, summary, tune
    from specbench.run.plan import RunConfig

    cfg = RunConfig(
        out=args.out, methods=args.methods, questions=question_selection(args), temperatures=args.temperatures,
        max_new_tokens=args.max_new_tokens, target=args.target, draft=args.draft, options=parse_options(args.opt),
        seed=args.seed, device=args.device, dtype=args.dtype, runtime=model_runtime(args), cost_curve=args.cost_curve,
        method_files=args.method_files)
    settings_file = args.settings_file or args.out / "settings.yaml"
    print(summary(tune(TuneConfig(cfg, settings_file))))
    print(f"settings: {settings_file} (apply with run --settings {settings_file})")
    return 0
