"""The command line's parser: every command's arguments, and the converters that turn them into settings."""
from __future__ import annotations

import argparse
from pathlib import Path

from specbench import __version__
from specbench.cli.tasks_command import add_tasks_parser
from specbench.decode.target import DEFAULT_TARGET
from specbench.errors import SpecbenchError
from specbench.run.tasks import SOURCES, QuestionSelection, parse_category_map
from specbench.train.training import AUTOCAST_TYPES


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _temperatures(text: str) -> list[float]:
    try:
        return [float(t) for t in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None


def parse_batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(b) for b in _csv(text)]
    except ValueError:
        raise SpecbenchError(f"--batch-size {text!r}: not a comma-separated list of whole numbers") from None
    return sorted(set(sizes))  # sizes > 0: checked with the run's other settings (plan.validate)


def parse_layers(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(i) for i in _csv(text))
    except ValueError:
        raise SpecbenchError(f"--feature-layers {text!r}: not a comma-separated list of layer indices") from None


def parse_options(pairs: list[str]) -> dict[str, str]:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SpecbenchError(f"--opt {pair!r}: expected key=value")
        options[key] = value
    return options


def _add_question_args(p: argparse.ArgumentParser, max_new_tokens: bool = True, limit: bool = True) -> None:
    p.add_argument("--tasks", type=_csv, default=["all"], help="comma-separated task names, or all (default)")
    p.add_argument("--suite", help="built-in task set: eagle (the EAGLE paper's six; the default) or spec-bench "
                                   "(Spec-Bench's six, over its question file given as --question-file or "
                                   "--question-dir DIR holding spec_bench/question.jsonl)")
    p.add_argument("--question-file", dest="question_files", type=Path, action="append", default=[],
                   metavar="FILE", help="a JSONL question file in the EAGLE/Spec-Bench format (repeatable); its "
                                        "`category` values become the tasks, grouped by --suite or --category-map")
    p.add_argument("--category-map", action="append", default=[], metavar="TASK=CAT,CAT",
                   help="with --question-file: one task made of several categories, e.g. "
                        "mt_bench=writing,roleplay,reasoning,math,coding,extraction,stem,humanities (repeatable)")
    p.add_argument("--task-file", dest="task_files", type=Path, action="append", default=[], metavar="YAML",
                   help="a task defined outside the package, in the schema of tasks/*.yaml (repeatable)")
    if limit:
        p.add_argument("--limit", type=int, help="the first N questions of each task, in file order (not spread "
                                                 "over a task's categories)")
    p.add_argument("--question-begin", type=int, help="as Spec-Bench: start at this line of the question file "
                                                      "(with --question-file: of the files' lines together)")
    p.add_argument("--question-end", type=int, help="as Spec-Bench: stop before this line (applied before --limit)")
    if max_new_tokens:
        p.add_argument("--max-new-tokens", type=int, help="new tokens per turn (default: each task's own)")
    p.add_argument("--question-dir", type=Path, help="a directory of <task>/question.jsonl files")
    p.add_argument("--source", choices=SOURCES, default="auto",
                   help="where questions come from; auto = --question-file or --question-dir if given, else the "
                        "embedded sample")


def question_selection(args: argparse.Namespace) -> QuestionSelection:
    return QuestionSelection(
        tasks=args.tasks, suite=args.suite, question_files=args.question_files,
        category_map=parse_category_map(args.category_map), task_files=args.task_files, source=args.source,
        question_dir=args.question_dir, limit=getattr(args, "limit", None), begin=args.question_begin,
        end=args.question_end, tail=getattr(args, "dev_questions", None))


def _add_method_file(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method-file", dest="method_files", type=Path, action="append", default=[], metavar="FILE.py",
                   help="a Python file defining METHODS (your own method, without editing specbench; repeatable)")


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=DEFAULT_TARGET, help="HF model id, local folder, .gguf, or a short name")
    p.add_argument("--device", default="auto", help="auto (GPU when present), cpu, cuda, cuda:1 ...")
    p.add_argument("--dtype", default="auto", help="auto (fp32 on CPU, bf16/fp16 on GPU), float32, bfloat16 ...")
    p.add_argument("--runtime", choices=["fast", "stock"], default="fast",
                   help="the target's runtime for every method, vanilla included: fast (default; specbench.decode.runtime) "
                        "or stock (transformers' modules as they are)")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="specbench", description="Benchmark harness for speculative decoding",
                                  epilog="example: python -m specbench run --methods vanilla,eagle,pld --tasks gsm8k "
                                         "--limit 2 --max-new-tokens 64 --temperatures 0")
    top.add_argument("--version", action="version", version=f"specbench {__version__}")
    sub = top.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="decode tasks with methods and write records",
        epilog="example: python -m specbench run --methods vanilla,eagle,pld --tasks all --limit 4 --max-new-tokens 128 --temperatures 0,1 --question-dir data/tasks --out results/mine")
    run.add_argument("--methods", type=_csv, default=["vanilla", "pld"],
                     help="comma-separated method names, each optionally with its own options, as in "
                          "eagle@total_tokens=8:top_k=3 (one row per variant: a sweep)")
    _add_question_args(run)
    run.add_argument("--temperatures", type=_temperatures, default=[0.0, 1.0], help="comma-separated, default 0,1")
    run.add_argument("--top-p", type=float, default=1.0)
    run.add_argument("--top-k", type=int, default=0)
    _add_model_args(run)
    run.add_argument("--draft", help="draft model for methods that use one (sps)")
    run.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                     help="method option, e.g. --opt gamma=5 (repeatable)")
    run.add_argument("--seed", type=int, default=0)
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
    _add_method_file(run)
    run.add_argument("--settings", type=Path, metavar="FILE",
                     help="apply the settings `tune` chose (per method and temperature) to the bare method names of "
                          "--methods; the run must evaluate other questions than those they were tuned on")
    run.add_argument("--measure-costs", action="store_true",
                     help="measure this machine's costs anew when the run starts (stored for later runs if the "
                          "machine is idle) instead of reusing the stored ones")

    tune = sub.add_parser(
        "tune", help="choose each method's settings on a development split, the same way for every method",
        description="Decodes every setting each method declares (see `list`; at most 4 per method) beside vanilla "
                    "on the last N questions of each task, and writes the fastest per method and temperature to a "
                    "settings file for `run --settings`.",
        epilog="example: python -m specbench tune --methods pld,lookahead,sps --question-dir data/tasks "
               "--dev-questions 3 --max-new-tokens 128 --temperatures 0 --out results/tune")
    tune.add_argument("--methods", type=_csv, required=True, help="comma-separated bare method names")
    _add_question_args(tune, limit=False)
    tune.add_argument("--dev-questions", type=int, default=3,
                      help="the last N questions of each task form the development split (default 3)")
    tune.add_argument("--temperatures", type=_temperatures, default=[0.0, 1.0], help="comma-separated, default 0,1")
    _add_model_args(tune)
    tune.add_argument("--draft", help="draft model for methods that use one (sps)")
    tune.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE", help="method option (repeatable)")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--out", type=Path, required=True, help="run directory of the tuning decode (rerun to resume)")
    tune.add_argument("--settings-file", type=Path, help="where the settings go (default OUT/settings.yaml)")
    tune.add_argument("--cost-curve", type=Path, help="the fixed costs to tune with (as run --cost-curve)")
    _add_method_file(tune)

    report = sub.add_parser("report", help="speedup and τ tables from a run directory",
        epilog="example: python -m specbench report results/mine --report-dir reports/mine; "
               "python -m specbench report --verify reports/fair/T0")
    report.add_argument("run_dir", type=Path, help="a run folder (with --verify: a report folder)")
    report.add_argument("--report-dir", "--out", dest="report_dir", type=Path, help="default RUN_DIR/report")
    report.add_argument("--no-plots", action="store_true", help="the tables only")
    report.add_argument("--verify", action="store_true",
                        help="remake the tables of the report folder RUN_DIR from the records its made_from.json "
                             "names and exit 1 if any differs from the committed ones (one line per file)")
    report.add_argument("--fix", action="store_true", help="--verify: write the remade tables over the committed")

    export = sub.add_parser("export", help="answer files of a run in another harness's format (spec-bench: one "
                                           "JSONL per method and temperature that Spec-Bench's speed.py reads)",
        epilog="example: python -m specbench export results/mine --format spec-bench")
    export.add_argument("run_dir", type=Path)
    export.add_argument("--format", default="spec-bench", help="spec-bench (the only one yet)")
    export.add_argument("--out", type=Path, help="default RUN_DIR/report/spec-bench")

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
    check.add_argument("--methods", type=_csv, help="--sampled: methods to compare with vanilla")
    _add_question_args(check, max_new_tokens=False)
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
    _add_method_file(check)
    check.add_argument("--out", type=Path, help="--sampled: where the table goes (default results/sampled-check-T<t>)")
    _add_model_args(check)

    doctor = sub.add_parser("doctor", help="check the install: versions, device, CPU flags, targets, shipped drafters",
                            epilog="example: python -m specbench doctor")
    _add_method_file(doctor)
    listing = sub.add_parser("list", help="methods and tasks; with METHOD, that method's options",
        epilog="example: python -m specbench list eagle (or list --method-file my_method.py)")
    listing.add_argument("method", nargs="?", help="a method: its options (type, default, what they do)")
    _add_method_file(listing)

    train = sub.add_parser("train", help="extract target features (cached, resumable) and train a drafter",
        epilog="example: python -m specbench train hydra --dataset heads/data/smollm2-135m-instruct/self-t0 --dataset-chunks 11 --max-tokens 640000 --out results/heads/hydra")
    train.add_argument("method", help="what to train: eagle, eagle3, medusa, hydra, sps-draft (and TRAINERS of "
                                      "--method-file)")
    _add_method_file(train)
    train.add_argument("--data", type=Path, default=Path("../shared/data/train/prompts.jsonl"),
                       help="training prompts, JSONL with turns and reference (default ../shared/data/train/prompts.jsonl)")
    train.add_argument("--features", type=Path, help="feature cache dir (default results/features/<target>-<mode>, "
                                                     "or results/features/<dataset folder name> with --dataset)")
    train.add_argument("--dataset", type=Path, help="train on a self-distilled dataset (specbench distill) instead "
                                                    "of --data/--mode; its features are rebuilt when missing")
    train.add_argument("--feature-layers", default="",
                       help="with --dataset: features rebuilt here also keep the concatenated hidden states at these "
                            "output_hidden_states indices (2,15,27: EAGLE-3's for the default target), from the same "
                            "prefill, so that `train eagle3` needs no second one")
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
    train.add_argument("--autocast", choices=sorted(AUTOCAST_TYPES),
                       help="mixed precision: each step's loss under torch.autocast (weights, optimizer and held-out "
                            "evaluation stay fp32); on a CPU it pays only with native bf16 (avx512_bf16 or AMX)")
    train.add_argument("--lr", type=float, default=3e-4)
    train.add_argument("--batch-tokens", type=int, default=4096)
    train.add_argument("--eval-every", type=int, default=200, help="steps between held-out evaluations")
    train.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                       help="method option, e.g. --opt inputs=token (repeatable)")
    train.add_argument("--snapshot-tokens", type=int, default=0,
                       help="also save the weights every N training positions under OUT/snapshots/ (0 = never)")
    train.add_argument("--seed", type=int, default=0)
    _add_model_args(train)

    distill = sub.add_parser("distill", help="self-distilled training data: the target answers training prompts in "
                                             "large batches; conversations (token ids) and, optionally, features",
        epilog="example: python -m specbench distill --prompts 256 --out results/data/self-t0")
    distill.add_argument("--data", type=Path, default=Path("../shared/data/train/prompts.jsonl"),
                         help="training prompts, JSONL with id and turns")
    distill.add_argument("--out", type=Path, required=True, help="dataset folder (manifest.json + chunk_*.npz)")
    distill.add_argument("--features", type=Path, help="also write the features of every conversation here, from "
                                                       "the generation's own forwards (a feature cache for train)")
    distill.add_argument("--feature-layers", default="",
                         help="with --features, also keep the hidden states at these output_hidden_states indices, "
                              "concatenated (EAGLE-3's fused features: 2,15,27 on a 30-layer target), so that "
                              "`train eagle3` runs no target forward")
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
    _add_model_args(distill)

    datastore = sub.add_parser("datastore", help="build the retrieval datastore of the methods that draft from one "
                                                 "(rest, samd)",
        epilog="example: python -m specbench datastore build")
    datastore.add_argument("action", choices=["build"])
    datastore.add_argument("--target", default=DEFAULT_TARGET)
    datastore.add_argument("--data", type=Path, default=Path("../shared/data/train/prompts.jsonl"),
                           help="training prompts whose reference replies go in (default "
                                "../shared/data/train/prompts.jsonl); the target's shipped self-distilled replies "
                                "go in too")

    add_tasks_parser(sub)

    bench = sub.add_parser("bench", help="our vanilla and pld against HF generate, interleaved; --cost: the target's "
                                         "forward cost over k tokens, stock HF against the engine's runtime",
        epilog="example: python -m specbench bench --overhead")
    _add_question_args(bench)
    _add_model_args(bench)
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
    return top


def parse_shard(text: str) -> tuple[int, int]:
    index, slash, count = text.partition("/")
    try:
        shard = (int(index), int(count))
    except ValueError:
        shard = (-1, 0)
    if not slash or not 0 <= shard[0] < shard[1]:
        raise SpecbenchError(f"--shard must be I/N with 0 <= I < N (e.g. 1/2), got {text!r}")
    return shard
