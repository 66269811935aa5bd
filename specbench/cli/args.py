"""What several commands' parsers share: argument groups (questions, model, method files) and the converters that
turn parsed arguments into settings."""
from __future__ import annotations

import argparse
from pathlib import Path

from specbench.decode.names import DEFAULT_TARGET, GRAPHS, KERNELS, RUNTIME_NAMES, Runtime
from specbench.errors import SpecbenchError
from specbench.run.tasks import SOURCES, QuestionSelection, parse_category_map


def csv_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def temperature_list(text: str) -> list[float]:
    try:
        return [float(t) for t in csv_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None


def parse_batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(b) for b in csv_list(text)]
    except ValueError:
        raise SpecbenchError(f"--batch-size {text!r}: not a comma-separated list of whole numbers") from None
    return sorted(set(sizes))  # sizes > 0: checked with the run's other settings (plan.validate)


def check_threads(threads: int | None) -> None:
    if threads is not None and threads < 1:
        raise SpecbenchError(f"--threads must be >= 1, got {threads}")


def parse_layers(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(i) for i in csv_list(text))
    except ValueError:
        raise SpecbenchError(f"--feature-layers {text!r}: not a comma-separated list of layer indices") from None


def parse_options(pairs: list[str]) -> dict[str, str]:
    """--opt key=value (repeated) as a dict."""
    from specbench.method import key_values

    return key_values(pairs, lambda pair: f"--opt {pair!r}: expected key=value")


def add_question_args(p: argparse.ArgumentParser, max_new_tokens: bool = True, limit: bool = True) -> None:
    p.add_argument("--tasks", type=csv_list, default=["all"], help="comma-separated task names, or all (default)")
    p.add_argument("--suite", help="built-in task set: eagle (the EAGLE paper's six; the default), spec-bench "
                                   "(Spec-Bench's six, over its question file given as --question-file or "
                                   "--question-dir DIR holding spec_bench/question.jsonl), speed-bench (SPEED-Bench's "
                                   "qualitative split, a task per category) or speed-bench-throughput (its throughput "
                                   "split, a task per input length); SPEED-Bench is read from the HF dataset "
                                   "nvidia/SPEED-Bench, or from --question-dir DIR holding speed_bench/<config>.jsonl")
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
    p.add_argument("--question-dir", type=Path, help="a directory of the tasks' question files (<task>/question.jsonl; "
                                                     "spec_bench/question.jsonl; speed_bench/<config>.jsonl)")
    p.add_argument("--source", choices=SOURCES, default="auto",
                   help="where questions come from; auto = --question-file or --question-dir if given, else the "
                        "embedded sample, else (SPEED-Bench) the task's HF dataset")


def question_selection(args: argparse.Namespace) -> QuestionSelection:
    return QuestionSelection(
        tasks=args.tasks, suite=args.suite, question_files=args.question_files,
        category_map=parse_category_map(args.category_map), task_files=args.task_files, source=args.source,
        question_dir=args.question_dir, limit=getattr(args, "limit", None), begin=args.question_begin,
        end=args.question_end, tail=getattr(args, "dev_questions", None))


def add_method_file(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method-file", dest="method_files", type=Path, action="append", default=[], metavar="FILE.py",
                   help="a Python file defining METHODS (your own method, without editing specbench; repeatable)")


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=DEFAULT_TARGET, help="HF model id, local folder, .gguf, or a short name")
    p.add_argument("--device", default="auto", help="auto (GPU when present), cpu, cuda, cuda:1 ...")
    p.add_argument("--dtype", default="auto", help="auto (fp32 on CPU, bf16/fp16 on GPU), float32, bfloat16 ...")
    p.add_argument("--kernels", choices=KERNELS, help="the target's product kernels, for every method, vanilla "
                   "included: few-token (CPU kernels for forwards over a few tokens), stock (transformers' modules) or "
                   "inductor (the target's forward compiled by torch.compile, its fused kernels under the graphs); "
                   "default auto: few-token on a CPU, stock on a GPU; docs/runtimes.md")
    p.add_argument("--graphs", choices=GRAPHS, help="CUDA graphs: on (every forward at a bucketed shape over a cache "
                   "reserved for the run, captured on CUDA; on a CPU the same shapes, uncaptured) or off (each "
                   "forward at its own shape); default auto: on on CUDA, off elsewhere")
    p.add_argument("--runtime", choices=list(RUNTIME_NAMES), dest="runtime_name",
                   help="a single name for the two choices above: eager = --kernels stock --graphs off (the EAGLE "
                        "and Spec-Bench code's GPU protocol); fast = --graphs off, stock = --kernels stock --graphs "
                        "off, compiled = --graphs on (the names from before the two choices)")


def model_runtime(args: argparse.Namespace, given_only: bool = False) -> Runtime | None:
    """The runtime the model arguments chose (--kernels and --graphs, or --runtime NAME); where none was given, the
    defaults (auto, auto), or None with `given_only`."""
    kernels, graphs, name = args.kernels, args.graphs, args.runtime_name
    if name is not None and (kernels or graphs):
        raise SpecbenchError(f"--runtime {name} names both choices: give it, or --kernels and --graphs, not both")
    if name is not None:
        return Runtime.of(name)
    return Runtime(kernels or "auto", graphs or "auto") if (kernels or graphs) else (None if given_only else Runtime())


def parse_shard(text: str) -> tuple[int, int]:
    index, slash, count = text.partition("/")
    try:
        shard = (int(index), int(count))
    except ValueError:
        shard = (-1, 0)
    if not slash or not 0 <= shard[0] < shard[1]:
        raise SpecbenchError(f"--shard must be I/N with 0 <= I < N (e.g. 1/2), got {text!r}")
    return shard
