"""`specbench run`: every (temperature, task, question) is decoded by every method in turn, so machine drift
hits all methods alike, and each finished question is recorded at once."""
from __future__ import annotations

import contextlib
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from tqdm import tqdm

from specbench.draft import Drafter
from specbench.answer import answer_questions, check_prompts_fit, warm_up
from specbench.errors import SpecbenchError
from specbench.costs import (CostModel, Machine, cpu_description, measure_cost_model, read_cost_model,
                             read_stored_costs, store_costs)
from specbench.load import LoadLog, LoadMeter, warning
from specbench.lock import folder_lock
from specbench.records import (RECORDS, RecordWriter, check_resumable, check_same_hardware, environment,
                               read_records, read_run_info, record_key, utc_now, write_load_log, write_run_info)
from specbench.registry import BuildContext, MethodInfo, select_methods
from specbench.sampling import Sampling
from specbench.target import DEFAULT_TARGET, load_model
from specbench.tasks import Question, QuestionSelection, Task, resolve_questions


@dataclass
class RunConfig:
    out: Path
    methods: list[str] = field(default_factory=lambda: ["vanilla", "pld"])
    tasks: list[str] = field(default_factory=lambda: ["all"])
    suite: str | None = None
    question_files: list[Path] = field(default_factory=list)
    category_map: dict[str, list[str]] = field(default_factory=dict)
    task_files: list[Path] = field(default_factory=list)
    question_begin: int | None = None
    question_end: int | None = None
    baseline: bool = True  # add vanilla when it is not among the methods: speedups need it
    temperatures: list[float] = field(default_factory=lambda: [0.0, 1.0])
    top_p: float = 1.0
    top_k: int = 0
    limit: int | None = None
    repeats: int = 1  # decode every question this many times (interleaved), for intervals on the tables
    max_new_tokens: int | None = None  # None: each task's default
    source: str = "auto"
    question_dir: Path | None = None
    target: str = DEFAULT_TARGET
    draft: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    device: str | None = None
    dtype: str | None = None
    runtime: str = "fast"
    cost_curve: Path | None = None  # reuse stored costs instead of measuring them when the run starts
    measure_costs: bool = False  # measure this machine's costs anew (and store them) instead of reusing them
    warmup_tokens: int = 16  # one untimed generation of this many tokens per method before the first question
    batch_sizes: list[int] = field(default_factory=lambda: [1])  # prompts decoded at once (each its own records)
    workers: int = 1  # above 1: decode on Ray workers (specbench.distributed), one GPU each or a share of the cores
    ray_address: str | None = None  # an existing Ray cluster ("auto": the one this machine joined)
    progress: bool = True

    def settings(self) -> dict[str, Any]:
        values = asdict(self)
        # How a run is spread, and whether its costs were measured anew, does not change what it decodes.
        for local in ("progress", "workers", "ray_address", "measure_costs"):
            values.pop(local)
        if values["batch_sizes"] == [1]:  # runs from before batching resume unchanged
            values.pop("batch_sizes")
        if self.question_dir is not None:  # the same questions whatever the working directory of a resume
            values["question_dir"] = str(self.question_dir.resolve())
        for key in ("question_files", "task_files"):
            values[key] = [str(Path(p).resolve()) for p in values[key]]
        return {k: str(v) if isinstance(v, Path) else v for k, v in values.items()}

    def selection(self) -> QuestionSelection:
        return QuestionSelection(
            tasks=self.tasks, suite=self.suite, question_files=list(self.question_files),
            category_map=dict(self.category_map), task_files=list(self.task_files), source=self.source,
            question_dir=self.question_dir, limit=self.limit, begin=self.question_begin, end=self.question_end)

    def method_names(self) -> list[str]:
        """The methods decoded: those asked for, with vanilla first when it is missing and the baseline is on."""
        plain = [spec.partition("@")[0] for spec in self.methods]
        return self.methods if not self.baseline or "vanilla" in plain else ["vanilla", *self.methods]


def validate(cfg: RunConfig) -> tuple[list[MethodInfo], dict[str, tuple[Task, list[Question]]]]:
    """Everything that can be checked before loading a model, and the questions."""
    methods = select_methods(cfg.method_names())
    if cfg.max_new_tokens is not None and cfg.max_new_tokens <= 0:
        raise SpecbenchError(f"--max-new-tokens must be > 0, got {cfg.max_new_tokens}")
    if cfg.repeats <= 0:
        raise SpecbenchError(f"--repeats must be > 0, got {cfg.repeats}")
    if not cfg.batch_sizes or min(cfg.batch_sizes) <= 0:
        raise SpecbenchError(f"--batch-size must be a list of sizes > 0, got {cfg.batch_sizes}")
    for t in cfg.temperatures:
        try:
            Sampling(t, cfg.top_p, cfg.top_k)
        except ValueError as exc:
            raise SpecbenchError(str(exc)) from None
    return methods, {task.name: (task, questions) for task, questions in resolve_questions(cfg.selection())}


def stored_costs(cfg: RunConfig) -> CostModel | None:
    """The run's fixed costs if they exist before it starts: its own (a resumed run decides as it did), else
    --cost-curve. Read before any model is loaded, so that a bad file costs one line and nothing else."""
    own = read_run_info(cfg.out).get("costs")
    if own:
        return CostModel.from_dict(own, str(cfg.out / "run.json"))
    if cfg.cost_curve is not None:
        return read_cost_model(cfg.cost_curve, cfg.target)
    return None


@dataclass
class Job:
    """Questions decoded together (one, or a batch of batch_size) at one temperature and repeat, by `methods` in
    that order (rotated from job to job, so that no method always runs first or right after another; methods that
    finished every question of the job are left out on resume)."""
    temperature: float
    task: str
    questions: list[Question]
    repeat: int
    methods: list[str]
    batch_size: int = 1
    batch_index: int = 0  # which batch of the task's questions (batches of batch_size in question order)

    def describe(self) -> str:
        ids = ", ".join(str(q.question_id) for q in self.questions)
        return f"{self.task} question{'s' if len(self.questions) > 1 else ''} {ids}"


def plan_jobs(cfg: RunConfig, methods: list[MethodInfo], tasks: list[Task], questions: dict[str, list[Question]],
              done: set[tuple]) -> list[Job]:
    """Repeats of a question (or batch) run back to back and methods alternate within each, so drift hits all
    methods alike. A batch of size B takes the task's next B questions in order (the last may be smaller)."""
    jobs = []
    every = []
    for t in cfg.temperatures:
        for task in tasks:
            for size in cfg.batch_sizes:
                qs = questions[task.name]
                for index, first in enumerate(range(0, len(qs), size)):
                    every.extend((t, task, qs[first:first + size], r, size, index) for r in range(cfg.repeats))
    for index, (temperature, task, batch, repeat, size, batch_index) in enumerate(every):
        shift = index % len(methods)
        order = [m.name for m in methods[shift:] + methods[:shift]]
        todo = [m for m in order if any(
            (m, task.name, float(temperature), str(q.question_id), repeat, size) not in done for q in batch)]
        if todo:
            jobs.append(Job(temperature, task.name, batch, repeat, todo, size, batch_index))
    return jobs


@dataclass
class WorkerInfo:
    """Where records are decoded: written into each record and, for every worker, into run.json."""
    worker: int
    host: str
    device: str  # the device kind: "cpu: <model> [flags]" or "cuda: <GPU name>"
    environment: dict[str, Any]


class Decoder:
    """The target and every method's drafter, loaded once; decodes jobs into records. The single-process run uses
    one; a distributed run one per worker."""

    def __init__(self, cfg: RunConfig, budgets: dict[str, int], worker: int = 0) -> None:
        self.cfg, self.budgets = cfg, budgets
        self.target = load_model(cfg.target, cfg.device, cfg.dtype, cfg.runtime)
        device = self.target.model.device
        env = environment(str(device), str(self.target.model.dtype).replace("torch.", ""))
        env["runtime"] = self.target.runtime.name if self.target.runtime else cfg.runtime
        env["cpu"] = cpu_description()
        kind = f"cuda: {env['cuda_device']}" if device.type == "cuda" else f"{device.type}: {env['cpu']}"
        self.info = WorkerInfo(worker, socket.gethostname(), kind, env)
        self.drafters: dict[str, Drafter] = {}
        self.methods: dict[str, MethodInfo] = {}

    def machine(self) -> Machine:
        env = self.info.environment
        return Machine(self.cfg.target, self.info.device, env["dtype"], env["runtime"], env["torch_threads"],
                       env["torch"], env["transformers"])

    def machine_costs(self, may_store: bool) -> CostModel:
        """This machine's stored costs, else measured now (and stored when may_store: the machine was idle)."""
        if not self.cfg.measure_costs:
            stored = read_stored_costs(self.machine())
            if stored is not None:
                return stored
        costs = measure_cost_model(self.target.model, self.cfg.target)
        if may_store:
            self.store_costs(costs)
        return costs

    def store_costs(self, costs: CostModel) -> None:
        problem = store_costs(self.machine(), costs)
        if problem:
            tqdm.write(problem, file=sys.stderr)

    def setup(self, methods: list[MethodInfo], costs: CostModel, questions: dict[str, list[Question]]) -> None:
        """Check the prompts fit, build the drafters with the run's fixed costs, warm every method up."""
        check_prompts_fit(self.target, questions, self.budgets)
        build = BuildContext(self.target, self.cfg.draft, self.cfg.options, self.cfg.device, self.cfg.dtype, costs)
        self.methods = {m.name: m for m in methods}
        self.drafters = {m.name: m.build(build) for m in methods}
        warm_up(self.target, self.drafters, next((qs[0] for qs in questions.values() if qs), None),
                self.cfg.warmup_tokens, tuple(self.cfg.batch_sizes))

    def decode(self, job: Job) -> Iterator[dict[str, Any]]:
        """Each method's records for the job (one per question), as soon as that method has answered every turn
        of every question. A batch is always decoded whole, so its timing is that of the batch size asked for."""
        cfg = self.cfg
        sampling = Sampling(job.temperature, cfg.top_p, cfg.top_k)
        for name in job.methods:
            method, drafter = self.methods[name], self.drafters[name]
            drafters = [drafter] + [drafter.fork() for _ in job.questions[1:]]
            choices = answer_questions(self.target, drafters, job.questions, job.task, sampling,
                                       self.budgets[job.task], cfg.seed, job.repeat)
            finished = time.time()  # when the answers were finished (Spec-Bench's answer files keep it)
            for question, choice in zip(job.questions, choices):
                record = {
                    "method": name, "lossless": method.lossless, "task": job.task,
                    "temperature": job.temperature, "top_p": cfg.top_p, "top_k": cfg.top_k,
                    "question_id": question.question_id, "category": question.category, "target": cfg.target,
                    "seed": cfg.seed, "max_new_tokens": self.budgets[job.task],
                    "drafter_state": drafter.state_scope, "repeat": job.repeat,
                }
                if job.batch_size > 1:
                    record["batch_size"] = job.batch_size
                    record["batch"] = {"index": job.batch_index, "size": len(job.questions)}
                record["choices"] = [choice]
                record["tstamp"] = finished
                record["worker"] = {"id": self.info.worker, "host": self.info.host, "device": self.info.device}
                yield record


@dataclass
class RunPlan:
    """What a run decodes, checked before any model is loaded."""
    methods: list[MethodInfo]
    questions: dict[str, list[Question]]
    budgets: dict[str, int]
    jobs: list[Job]
    costs: CostModel | None  # fixed before the run: its own on resume, or --cost-curve


def plan_run(cfg: RunConfig) -> RunPlan:
    """Validate (again: cheap) and plan; the caller holds the run folder's lock, so what is done cannot change."""
    methods, selected = validate(cfg)
    tasks = [task for task, _ in selected.values()]
    questions = {name: qs for name, (_, qs) in selected.items()}
    budgets = {t.name: cfg.max_new_tokens or t.max_new_tokens for t in tasks}
    check_resumable(cfg.out, cfg.settings())
    costs = stored_costs(cfg)
    done = {record_key(r) for r in read_records(cfg.out)} if (cfg.out / RECORDS).is_file() else set()
    return RunPlan(methods, questions, budgets, plan_jobs(cfg, methods, tasks, questions, done), costs)


def run(cfg: RunConfig) -> Path:
    """Decode what the run folder still lacks, holding its lock (one writer at a time)."""
    validate(cfg)  # bad input costs one line before the folder is created or locked
    with folder_lock(cfg.out, "run folder"):
        plan = plan_run(cfg)
        meter = LoadMeter()
        log = LoadLog(started=utc_now(), at_start=meter.other_share(wait=True) or 0.0)
        if log.busy:
            tqdm.write(warning(log.at_start, log.cores, "as the run started"), file=sys.stderr)
        if cfg.workers > 1 or cfg.ray_address:
            from specbench.distributed import run_distributed

            return run_distributed(cfg, plan, log)
        return _run_here(cfg, plan, meter, log)


def _run_here(cfg: RunConfig, plan: RunPlan, meter: LoadMeter, log: LoadLog) -> Path:
    decoder = Decoder(cfg, plan.budgets)
    check_same_hardware(cfg.out, decoder.info.environment)
    costs = plan.costs or decoder.machine_costs(may_store=False)
    decoder.setup(plan.methods, costs, plan.questions)
    if plan.costs is None and not log.busy:
        decoder.store_costs(costs)  # once, with the drafting costs the methods measured while being built
    write_run_info(cfg.out, cfg.settings(), decoder.info.environment, costs.to_dict(), [asdict(decoder.info)])
    writer = RecordWriter(cfg.out)
    meter.other_share(wait=True)  # the per-question windows start here, after loading and warm-up
    unread, warned = 0, log.busy  # one warning line per session
    try:
        for job in tqdm(plan.jobs, desc="questions" if cfg.batch_sizes == [1] else "batches",
                        unit="q" if cfg.batch_sizes == [1] else "batch", disable=not cfg.progress):
            for record in decoder.decode(job):
                if record_key(record) not in writer.done:  # a batch cut short by a stop is decoded whole again
                    writer.write(record)
            unread += 1
            share = meter.other_share()
            if share is not None:
                if log.add(share, unread) and not warned:
                    tqdm.write(warning(share, log.cores, f"while {job.describe()} decoded"), file=sys.stderr)
                    warned = True
                unread = 0
    except BaseException:
        with contextlib.suppress(OSError):  # the error in flight is the one to report (a full disk, say)
            write_load_log(cfg.out, log.to_dict())
        raise
    write_load_log(cfg.out, log.to_dict())
    return cfg.out
