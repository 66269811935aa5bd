"""What a run decodes, decided before any model is loaded: its settings (RunConfig), the questions and methods
(checked once, here), and the jobs still to do in the run folder."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from specbench.decode.cost_model import CostModel, read_cost_model
from specbench.decode.model_files import check_draft, resolve
from specbench.decode.names import DEFAULT_TARGET, Runtime, Sampling
from specbench.errors import SpecbenchError
from specbench.method import MethodInfo
from specbench.run.record import record_key
from specbench.run.records import RECORDS, read_records
from specbench.run.registry import check_references, select_methods
from specbench.run.run_info import FOLDER_COSTS, check_resumable, read_run_info
from specbench.run.settings import check_disjoint, read_settings
from specbench.run.tasks import Question, QuestionSelection, Task, resolve_questions


@dataclass
class RunConfig:
    out: Path
    methods: list[str] = field(default_factory=lambda: ["vanilla", "pld"])
    references: list[str] = field(default_factory=list)  # reference rows (specbench.run.reference), not methods
    questions: QuestionSelection = field(default_factory=QuestionSelection)
    baseline: bool = True  # add vanilla when it is not among the methods: speedups need it
    temperatures: list[float] = field(default_factory=lambda: [0.0, 1.0])
    top_p: float = 1.0
    top_k: int = 0
    repeats: int = 1  # decode every question this many times (interleaved), for intervals on the tables
    max_new_tokens: int | None = None  # None: each task's default
    target: str = DEFAULT_TARGET
    draft: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    device: str | None = None
    dtype: str | None = None
    runtime: Runtime = field(default_factory=Runtime)
    # TIMING ONLY: accept along each draft's best path at these conditional per-position rates instead of verifying
    # (specbench.run.synthetic); None: lossless verification
    synthetic: list[float] | None = None
    # TIMING ONLY, a replayed acceptance profile's per-category rates (category -> rates; synthetic holds its overall
    # ones, replayed for the other categories); None: the same rates for every question
    synthetic_categories: dict[str, list[float]] | None = None
    cost_curve: Path | None = None  # reuse stored costs instead of measuring them when the run starts
    measure_costs: bool = False  # measure this machine's costs anew (and store them) instead of reusing them
    warmup_tokens: int = 16  # one untimed generation of this many tokens per method before the first question
    batch_sizes: list[int] = field(default_factory=lambda: [1])  # prompts decoded at once (each its own records)
    threads: int | None = None  # torch threads (None: run.load.decoding_threads chooses)
    require_graphs: bool = False  # a failed CUDA graph capture (or a runtime that captures none) is an error
    workers: int = 1  # above 1: decode on Ray workers (specbench.run.distributed), one GPU each or a share of the cores
    ray_address: str | None = None  # an existing Ray cluster ("auto": the one this machine joined)
    settings_file: Path | None = None  # `tune`'s settings, already applied to `methods` (apply_settings)
    method_files: list[Path] = field(default_factory=list)  # --method-file: methods from outside the package
    progress: bool = True

    def settings(self) -> dict[str, Any]:
        values = {**asdict(self), **self.questions.settings()}
        del values["questions"]
        # How a run is spread, and whether its costs were measured anew, does not change what it decodes.
        for local in ("progress", "workers", "ray_address", "measure_costs", "threads", "require_graphs"):
            values.pop(local)
        if values["settings_file"] is None:  # runs from before tuning resume unchanged
            values.pop("settings_file")
        if values["method_files"]:
            values["method_files"] = [str(Path(p).resolve()) for p in values["method_files"]]
        else:  # runs from before method files resume unchanged
            values.pop("method_files")
        if values["synthetic"] is None:  # runs from before synthetic acceptance resume unchanged
            values.pop("synthetic")
        if values["synthetic_categories"] is None:  # runs from before replayed profiles resume unchanged
            values.pop("synthetic_categories")
        if values["batch_sizes"] == [1]:  # runs from before batching resume unchanged
            values.pop("batch_sizes")
        if not values["references"]:  # runs from before reference rows resume unchanged
            values.pop("references")
        return {k: str(v) if isinstance(v, Path) else v for k, v in values.items()}

    def synthetic_rates(self, category: str) -> list[float] | None:
        """The synthetic acceptance rates a question of this category (Record.task_category) is decoded at."""
        return (self.synthetic_categories or {}).get(category, self.synthetic)

    def method_names(self) -> list[str]:
        """The methods decoded: those asked for, with vanilla first when it is missing and the baseline is on."""
        plain = [spec.partition("@")[0] for spec in self.methods]
        return self.methods if not self.baseline or "vanilla" in plain else ["vanilla", *self.methods]


def check_capturable(runtime: Runtime, device: str | None) -> None:
    """--require-graphs: CUDA graphs are captured where graphs are on (auto's choice on CUDA) on a CUDA device."""
    import torch  # only for --require-graphs: every other check here runs before torch loads

    cuda = device.startswith("cuda") if device not in (None, "auto") else torch.cuda.is_available()
    if runtime.graphs == "off" or not cuda:
        raise SpecbenchError(f"--require-graphs: this run would capture no CUDA graphs (--graphs {runtime.graphs}, "
                             f"device {device or 'auto'}{'' if cuda else ', no CUDA device'}): they need --graphs on "
                             "or auto on a CUDA device")


def validate(cfg: RunConfig) -> "Checked":
    """Everything that can be checked before loading a model, and the questions; nothing here imports torch (but
    --require-graphs and --synthetic-acceptance), so bad input costs one line at once."""
    methods = select_methods(cfg.method_names(), cfg.method_files, cfg.options)
    check_model_files(cfg, methods)
    check_references(cfg.references, cfg.batch_sizes)
    if cfg.max_new_tokens is not None and cfg.max_new_tokens <= 0:
        raise SpecbenchError(f"--max-new-tokens must be > 0, got {cfg.max_new_tokens}")
    if cfg.repeats <= 0:
        raise SpecbenchError(f"--repeats must be > 0, got {cfg.repeats}")
    if not cfg.batch_sizes or min(cfg.batch_sizes) <= 0:
        raise SpecbenchError(f"--batch-size {','.join(map(str, cfg.batch_sizes))}: batch sizes must be > 0")
    if cfg.workers < 1:
        raise SpecbenchError(f"--workers must be >= 1, got {cfg.workers}")
    for t in cfg.temperatures:
        try:
            Sampling(t, cfg.top_p, cfg.top_k)
        except ValueError as exc:
            raise SpecbenchError(str(exc)) from None
    if cfg.synthetic is not None:  # a timing-only run: its rates are checked by the sampler that replays them
        from specbench.run.synthetic import SyntheticAcceptance

        for rates in [cfg.synthetic, *(cfg.synthetic_categories or {}).values()]:
            SyntheticAcceptance(tuple(rates))  # one error line for rates outside [0, 1]
    if cfg.require_graphs:
        check_capturable(cfg.runtime, cfg.device)
    selected = {task.name: (task, questions) for task, questions in resolve_questions(cfg.questions)}
    if cfg.synthetic_categories and max(cfg.batch_sizes) > 1:
        check_one_rate_per_task(cfg, selected)
    if cfg.settings_file is not None:
        tuned = read_settings(cfg.settings_file)
        if tuned.target != cfg.target:
            raise SpecbenchError(f"--settings {cfg.settings_file} was tuned for target {tuned.target}, not {cfg.target}")
        check_disjoint(tuned, selected, cfg.settings_file)
    return methods, selected


def check_model_files(cfg: RunConfig, methods: list[MethodInfo]) -> None:
    """--out is a folder (or nothing yet); --target, --draft and every head=FOLDER name something that loads."""
    if cfg.out.exists() and not cfg.out.is_dir():
        raise SpecbenchError(f"--out {cfg.out}: a file, not a run folder")
    resolve(cfg.target, assemble=False)
    if cfg.draft is not None:
        check_draft(cfg.draft)
    for m in methods:
        if m.given.get("head"):  # method@head=FOLDER, or --opt head=FOLDER for the methods that declare it
            check_draft(m.given["head"], f"{m.name}: head=")


def check_one_rate_per_task(cfg: RunConfig, selected: dict[str, tuple[Task, list[Question]]]) -> None:
    """A batch is verified at one set of rates: a profile replayed per category at batch sizes above one needs every
    question of a task to get the same rates."""
    for name, (_, questions) in selected.items():
        if len({tuple(cfg.synthetic_rates(q.category or name) or ()) for q in questions}) > 1:
            raise SpecbenchError(f"--synthetic-acceptance: the profile gives task {name}'s questions different rates "
                                 "per category, and a batch is verified at one set of rates: use --batch-size 1")


def stored_costs(cfg: RunConfig) -> CostModel | None:
    """The run's fixed costs if they exist before it starts: its own (a resumed run decides as it did: run.json, or
    costs.json when the session that measured them stopped before writing run.json), else --cost-curve. Read before
    any model is loaded, so that a bad file costs one line and nothing else."""
    own = read_run_info(cfg.out).costs
    if own:
        return CostModel.from_dict(own, str(cfg.out / "run.json"))
    early = cfg.out / FOLDER_COSTS  # measured by an earlier session that stopped before it wrote run.json
    if early.is_file():
        kept = CostModel.from_dict(json.loads(early.read_text(encoding="utf-8")), str(early))
        return replace(kept, source=f"{kept.source or 'measured'} (kept in {early} for this run folder's resumes)")
    if cfg.cost_curve is not None:
        return replace(read_cost_model(cfg.cost_curve, cfg.target), source=f"--cost-curve {cfg.cost_curve}")
    return None


@dataclass
class Job:
    """Questions decoded together (one, or a batch of batch_size) at one temperature and repeat, by `methods` in
    that order (rotated from job to job, so that no method always runs first or right after another). A job runs whole
    or not at all: on resume, a job of which some methods finished is decoded again by all (plan_run)."""
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
    methods alike. A batch of size B takes the task's next B questions in order (the last may be smaller). The
    reference rows (cfg.references) take their turn among the methods."""
    names = [m.name for m in methods] + list(cfg.references)
    jobs = []
    every = []
    for t in cfg.temperatures:
        for task in tasks:
            for size in cfg.batch_sizes:
                qs = questions[task.name]
                for index, first in enumerate(range(0, len(qs), size)):
                    every.extend((t, task, qs[first:first + size], r, size, index) for r in range(cfg.repeats))
    for index, (temperature, task, batch, repeat, size, batch_index) in enumerate(every):
        shift = index % len(names)
        order = names[shift:] + names[:shift]
        job = Job(temperature, task.name, batch, repeat, order, size, batch_index)
        if job_keys(job) - done:  # every method again: a job's methods are timed in one process
            jobs.append(job)
    return jobs


def job_keys(job: Job) -> set[tuple]:
    """The records a job writes: one per method and question."""
    return {record_key(m, job.task, job.temperature, q.question_id, job.repeat, job.batch_size)
            for m in job.methods for q in job.questions}


def row_options(cfg: RunConfig, methods: list[MethodInfo]) -> dict[str, dict[str, Any]]:
    """Every row's options as it runs, defaults included (the methods, then the reference rows), for run.json."""
    from specbench.run.reference import reference_options  # transformers' compile settings: read as the run starts

    return {**{m.name: m.effective() for m in methods}, **{r: reference_options(r) for r in cfg.references}}


@dataclass
class RunPlan:
    """What a run decodes, checked before any model is loaded."""
    methods: list[MethodInfo]
    questions: dict[str, list[Question]]
    budgets: dict[str, int]
    jobs: list[Job]
    costs: CostModel | None  # fixed before the run: its own on resume, or --cost-curve
    rerun_keys: set[tuple] = field(default_factory=set)  # records of jobs decoded again whole (plan_run)


Checked = tuple[list[MethodInfo], dict[str, tuple[Task, list[Question]]]]  # what validate returns


def plan_run(cfg: RunConfig, checked: Checked) -> RunPlan:
    """Plan what validate checked; the caller holds the run folder's lock, so what is done cannot change."""
    methods, selected = checked
    tasks = [task for task, _ in selected.values()]
    questions = {name: qs for name, (_, qs) in selected.items()}
    budgets = {t.name: cfg.max_new_tokens or t.max_new_tokens for t in tasks}
    check_resumable(cfg.out, cfg.settings())
    costs = stored_costs(cfg)
    done = {r.key() for r in read_records(cfg.out)} if (cfg.out / RECORDS).is_file() else set()
    jobs = plan_jobs(cfg, methods, tasks, questions, done)
    # A job some of whose methods finished in an earlier process (an interrupt, or methods added on resume) is
    # decoded again whole, so that its speedups pair times taken in one process, under one load.
    rerun = set().union(*(job_keys(job) & done for job in jobs))  # RunWriter moves them aside as decoding starts
    return RunPlan(methods, questions, budgets, jobs, costs, rerun)
