"""The decoding side of a run: the target and every method's drafter, loaded once, turning jobs into records. The
single-process run uses one Decoder; a distributed run one per Ray worker."""
from __future__ import annotations

import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

import torch
from tqdm import tqdm

from specbench.decode.cost_model import CostModel
from specbench.decode.costs import CONTEXT, cpu_description, forward_timer
from specbench.decode.draft import Drafter
from specbench.decode.inputs import Blocks, target_forward
from specbench.decode.layout import AttentionLayout
from specbench.decode.runner import BATCH_SIZES, BLOCK_SIZES, ModelRunner, bucket
from specbench.decode.runtime import fastest_seconds
from specbench.decode.sampling import Sampling
from specbench.method import BuildContext, MethodInfo
from specbench.run.answer import answer_questions, check_prompts_fit, conversation_capacity, warm_up
from specbench.run.cost_rounds import CostPlan, CostRounds, CostWatch, measure_curve
from specbench.run.cost_store import Machine, MachineWatch, machine_costs, store_costs
from specbench.run.energy import open_counter
from specbench.run.failures import target_step
from specbench.run.footprint import target_bytes
from specbench.run.kernel_rule import load_target
from specbench.run.kernel_store import rule_record
from specbench.run.plan import Job, RunConfig
from specbench.run.progress import TokenProgress
from specbench.run.record import BatchPlace, Record, Worker
from specbench.run.records import environment
from specbench.run.reference import ReferenceDecoder
from specbench.run.registry import available_methods
from specbench.run.synthetic import SyntheticAcceptance
from specbench.run.tasks import Question

COPY_BYTES = 256 * 2**20  # the copy probe's tensor: far beyond any CPU's last-level cache and an H100's L2


@dataclass
class WorkerInfo:
    """Where records are decoded: written into each record and, for every worker, into run.json."""
    worker: int
    host: str
    device: str  # the device kind: "cpu: <model> [flags]" or "cuda: <GPU name>"
    environment: dict[str, Any]
    trained_from: dict[str, str] = field(default_factory=dict)  # method -> the trained weights its drafter loaded


class Decoder:
    """The target and every method's drafter, loaded once; decodes jobs into records. The single-process run uses
    one; a distributed run one per worker."""

    def __init__(self, cfg: RunConfig, budgets: dict[str, int], worker: int = 0, idle_threads: int | None = None) -> None:
        """idle_threads: the threads this process would decode with on an idle machine, under which its stored
        costs are kept (a run that the load made decode with fewer reuses the idle run's costs, so it decides
        the same); default the threads it has."""
        self.cfg, self.budgets, self.idle_threads = cfg, budgets, idle_threads
        self.target = load_target(cfg.target, cfg.device, cfg.dtype, cfg.runtime)
        device = self.target.model.device
        env = environment(str(device), str(self.target.model.dtype).replace("torch.", ""))
        env["runtime"] = self.target.runtime.name if self.target.runtime else "stock"
        env.update(rule_record(self.target.runtime))  # the few-token kernels' rule and where it came from
        env["cpu"] = cpu_description()
        env["target_bytes"] = target_bytes(self.target.model).to_dict()  # the report's roofline
        counter = open_counter(device)
        self.energy = None if isinstance(counter, str) else counter
        env["energy_unavailable" if isinstance(counter, str) else "energy_counter"] = getattr(counter, "name", counter)
        kind = f"cuda: {env['cuda_device']}" if device.type == "cuda" else f"{device.type}: {env['cpu']}"
        self.info = WorkerInfo(worker, socket.gethostname(), kind, env)
        self.drafters: dict[str, Drafter] = {}
        self.methods: dict[str, MethodInfo] = {}
        self.references: dict[str, ReferenceDecoder] = {}
        self.capacity: int | None = None  # the run's cache length, once reserved (reserve)

    def machine(self) -> Machine:
        env = self.info.environment
        threads = env["torch_threads"] if self.idle_threads is None else self.idle_threads
        runtime = env["runtime"] + (f" ({env['kernel_rule']})" if "kernel_rule" in env else "")  # costs follow the rule
        return Machine(self.cfg.target, self.info.device, env["dtype"], runtime, threads, env["torch"],
                       env["transformers"])

    def reserve(self, questions: dict[str, list[Question]]) -> int:
        """The run's one cache length (the target's, the hf-compiled row's): the longest conversation's; the target's
        cache is reserved for it and the largest batch, once (the first call:
        before the costs are measured, so that they and the captured shapes are the cache's the run decodes on).
        Returns the length."""
        if self.capacity is None:
            self.capacity = max((conversation_capacity(self.target, qs, self.budgets[task])
                                 for task, qs in questions.items()), default=0)
            self.target.runner.reserve(max(self.cfg.batch_sizes), self.capacity)
        return self.capacity

    def machine_costs(self, quiet: bool, store: bool) -> CostModel:
        """This machine's costs (specbench.run.cost_store.machine_costs; quiet: the machine was idle as the run
        started), stored now when store and freshly measured (else the caller stores them after setup)."""
        with target_step(self.target, "the cost measurement"):
            costs = machine_costs(
                self.machine(), self.measure_costs, lambda: probe_seconds(self.target.runner),
                self.cfg.measure_costs, quiet, lambda line: tqdm.write(line, file=sys.stderr))
        if store and not costs.source.startswith("stored"):
            self.store_costs(costs)
        return self.with_bandwidth(costs)

    def measure_costs(self, watch: MachineWatch, plan: CostPlan) -> CostModel:
        return measure_cost_model(self.target.runner, self.cfg.target, watch=watch, plan=plan)

    def with_bandwidth(self, costs: CostModel) -> CostModel:
        """The costs with the device's copy bandwidth, measured now where they came without it (costs stored
        before it was measured, an older run's, a --cost-curve file): a fact for the report, deciding nothing."""
        if costs.copy_gbps is None:
            costs.copy_gbps = measure_copy_bandwidth(self.target.model.device)
        return costs

    def store_costs(self, costs: CostModel) -> None:
        problem = store_costs(self.machine(), costs)
        if problem:
            tqdm.write(problem, file=sys.stderr)

    def setup(self, methods: list[MethodInfo], costs: CostModel, questions: dict[str, list[Question]]) -> None:
        """Check the prompts fit, build the drafters with the run's fixed costs, warm every method up."""
        check_prompts_fit(self.target, questions, self.budgets)
        build = BuildContext(self.target, self.cfg.draft, device=self.cfg.device, dtype=self.cfg.dtype, costs=costs,
                             methods=available_methods(self.cfg.method_files))
        runner = self.target.runner
        if self.cfg.require_graphs:
            runner.require_capture()  # before the drafters are built: their graphs require it too
        self.methods = {m.name: m for m in methods}
        self.drafters = {m.name: m.drafter(build) for m in methods}
        self.info.trained_from = {name: d.trained_from for name, d in self.drafters.items() if d.trained_from}
        capacity = self.reserve(questions)
        if self.cfg.references:
            self.references = {name: ReferenceDecoder(self.target, name, capacity) for name in self.cfg.references}
        first = next((qs[0] for qs in questions.values() if qs), None)
        with target_step(self.target, "the warm-up"):
            if runner.fixed_shapes:  # every target shape a step can take, captured on the run's cache (CUDA)
                prepare_shapes(runner, max(self.cfg.batch_sizes),
                               hidden=any(d.hidden_layers for d in self.drafters.values()))
            warm_up(self.target, self.drafters, first, self.cfg.warmup_tokens, self.warm_up_sizes(),
                    SyntheticAcceptance(tuple(self.cfg.synthetic)) if self.cfg.synthetic else None)
            for reference in self.references.values():
                reference.warm_up(first, self.cfg.warmup_tokens)
        if runner.fixed_shapes:  # what was captured before timing (a drafter's later shapes are counted as timed)
            runner.start_timing()
            self.info.environment["cuda_graphs"] = capture_report(runner).line()

    def warm_up_sizes(self) -> tuple[int, ...]:
        """The batch sizes each method warms up at: the run's, and with fixed shapes every row bucket below its
        largest too (a batch whose rows finish at different steps drafts at those; their shapes are captured then,
        not inside a timed question)."""
        sizes = set(self.cfg.batch_sizes)
        if self.target.runner.fixed_shapes:
            sizes |= {b for b in BATCH_SIZES if b < max(sizes)}
        return tuple(sorted(sizes))

    def capture_report(self) -> dict[str, Any] | None:
        """The fixed shapes met and captured so far (run.json's cuda_graphs at the end of a run), or None."""
        runner = self.target.runner
        return capture_report(runner).to_dict() if runner.fixed_shapes else None

    def decode(self, job: Job, progress: TokenProgress | None = None) -> Iterator[Record]:
        """Each method's records for the job (one per question), as soon as that method has answered every turn
        of every question. A batch is always decoded whole, so its timing is that of the batch size asked for.
        progress: shows each method's tokens as they come."""
        cfg = self.cfg
        sampling = Sampling(job.temperature, cfg.top_p, cfg.top_k)
        for name in job.methods:
            if name in self.references:
                yield self.reference_record(job, name, sampling, progress)
                continue
            method, drafter = self.methods[name], self.drafters[name]
            drafters = [drafter] + [drafter.fork() for _ in job.questions[1:]]
            on_step = progress.method(name, job, self.budgets[job.task]) if progress else None
            # one set of rates per batch (validate: a replayed profile's categories agree within a batch)
            synthetic = cfg.synthetic_rates(job.questions[0].category or job.task)
            with target_step(self.target, f"decoding {job.describe()} with {name}"):
                choices = answer_questions(self.target, drafters, job.questions, job.task, sampling,
                                           self.budgets[job.task], cfg.seed, job.repeat, on_step, self.energy,
                                           SyntheticAcceptance(tuple(synthetic)) if synthetic else None)
            finished = time.time()  # when the answers were finished (Spec-Bench's answer files keep it)
            for question, choice in zip(job.questions, choices):
                yield Record(
                    method=name, task=job.task, temperature=job.temperature, question_id=question.question_id,
                    choice=choice, lossless=method.lossless, top_p=cfg.top_p, top_k=cfg.top_k,
                    category=question.category, target=cfg.target, seed=cfg.seed,
                    max_new_tokens=self.budgets[job.task], drafter_state=drafter.state_scope, repeat=job.repeat,
                    batch_size=job.batch_size, options=method.effective(),
                    batch=BatchPlace(job.batch_index, len(job.questions)) if job.batch_size > 1 else None,
                    tstamp=finished, worker=Worker(self.info.worker, self.info.host, self.info.device),
                    synthetic=synthetic)

    def reference_record(self, job: Job, name: str, sampling: Sampling, progress: TokenProgress | None) -> Record:
        """A reference row's record for a one-question job (specbench.run.reference), in the methods' schema."""
        cfg, reference, question = self.cfg, self.references[name], job.questions[0]
        on_step = progress.method(name, job, self.budgets[job.task]) if progress else None
        with target_step(self.target, f"decoding {job.describe()} with {name}"):
            choice = reference.answer(question, job.task, sampling, self.budgets[job.task], cfg.seed, job.repeat,
                                      on_step, self.energy)
        return Record(
            method=name, task=job.task, temperature=job.temperature, question_id=question.question_id, choice=choice,
            top_p=cfg.top_p, top_k=cfg.top_k, category=question.category, target=cfg.target, seed=cfg.seed,
            max_new_tokens=self.budgets[job.task], repeat=job.repeat, options=reference.options(), tstamp=time.time(),
            worker=Worker(self.info.worker, self.info.host, self.info.device))


@torch.inference_mode()
def measure_copy_bandwidth(device: torch.device, nbytes: int = COPY_BYTES, repeats: int = 5) -> float:
    """GB/s of the fastest of `repeats` copies of an nbytes tensor into another on the device, counting the bytes
    read and the bytes written (STREAM's "copy" convention), with the threads the run decodes with."""
    source = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dest = torch.empty_like(source)
    seconds = fastest_seconds(lambda: dest.copy_(source), device, repeats)
    return 2 * nbytes / seconds / 1e9


def probe_seconds(runner: ModelRunner, repeats: int = 3) -> float:
    """A quick T(1): the fastest of `repeats` tree-masked one-token forwards after the measurement's context (what a
    run compares its stored T(1) with as it starts)."""
    return forward_timer(runner, True, repeats, CONTEXT)(1)


def measure_cost_model(runner: ModelRunner, target: str, rounds: int = 3, watch: CostWatch | None = None,
                       plan: CostPlan | None = None) -> CostModel:
    """The run's verification curve, measured in interleaved rounds with the load read during them and checked
    before it may be kept (its Measurement says when, how, under what load and, where it failed its checks, why),
    on the target's runner (the shapes the run decodes at). watch: how the load is read, the samples kept and
    progress shown (default: no load reading, nothing kept, no progress). plan: how (default CostPlan with
    `rounds`)."""
    watch = watch or CostWatch()
    plan = plan or CostPlan(rounds=rounds)
    samples = watch.resume(plan)
    model = runner.model
    timed = forward_timer(runner, True, plan.repeats, CONTEXT)
    done = sum(x is not None for row in samples.seconds for x in row)
    with watch.progress(len(plan.sizes) * plan.rounds, done) as tick:
        curve, measured = measure_curve(CostRounds(plan, timed, watch, tick), samples)
    return CostModel(target, str(model.device), cpu_description(), curve, copy_gbps=measure_copy_bandwidth(model.device),
                     measured=measured)


@torch.inference_mode()
def prepare_shapes(runner: ModelRunner, rows: int, hidden: bool) -> None:
    """Every shape a step of up to `rows` rows can take with fixed shapes (each bucket of rows and of block tokens;
    with and without hidden states where a drafter reads them), met on the run's cache before anything is timed: on
    CUDA each is captured here, so that no timed question pays for a capture."""
    model = runner.model
    layout = AttentionLayout.of(model.config)
    for size_rows in [b for b in BATCH_SIZES if b <= bucket(rows, BATCH_SIZES)]:
        for size in BLOCK_SIZES:
            block = Blocks.chains([[0] * size], [0])
            for with_hidden in sorted({False, hidden}):
                runner.prepare(size_rows, size, with_hidden, lambda shape: target_forward(
                    runner, block, [0], shape, shape.tokens, with_hidden, model.dtype, model.device, layout))


@dataclass
class CaptureReport:
    """run.json's `cuda_graphs`: the shapes a run met and captured, and the ones first met inside timed questions
    (on CUDA a capture there; on the CPU, where nothing is captured, the capture there would have been)."""
    asked: bool  # CUDA graphs were asked for (fixed shapes on CUDA)
    target_shapes: int
    drafting_shapes: int
    target_captures: int
    drafting_captures: int
    target_timed: int
    drafting_timed: int
    uncaptured: str  # why a set of graphs stopped capturing ("" when none did)
    own_shape_timed: int = 0  # forwards of timed questions at their own shape, uncaptured (graphs.StaticStats)

    def line(self) -> str:
        timed = (f"; first met during timing: {self.target_timed} target and {self.drafting_timed} drafting shapes"
                 if self.target_timed or self.drafting_timed else "; none first met during timing")
        if self.own_shape_timed:
            timed += (f"; {self.own_shape_timed} timed forwards ran at their own shape, uncaptured (a prompt past the "
                      f"largest bucket of {BLOCK_SIZES[-1]} tokens, or a drafter's call over a subset of the rows)")
        if not self.asked:
            return (f"none (not on CUDA): {self.target_shapes} target and {self.drafting_shapes} drafting shapes met"
                    + timed)
        return (f"{self.target_captures} target shapes and {self.drafting_captures} drafting shapes captured" + timed
                + (f"; UNCAPTURED: {self.uncaptured}" if self.uncaptured else ""))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "line": self.line()}


def capture_report(runner: ModelRunner) -> CaptureReport:
    """What a runner captured, the target's and its drafters' graphs apart, when, and why not."""
    drafting = runner.drafting
    return CaptureReport(
        asked=runner.capture,
        target_shapes=runner.graphs.stats.shapes, drafting_shapes=sum(g.stats.shapes for g in drafting),
        target_captures=runner.graphs.stats.captures, drafting_captures=sum(g.stats.captures for g in drafting),
        target_timed=runner.graphs.stats.timed, drafting_timed=sum(g.stats.timed for g in drafting),
        uncaptured=next((g.stats.uncaptured for g in [runner.graphs, *drafting] if g.stats.uncaptured), ""),
        own_shape_timed=sum(g.stats.own_shape_timed for g in [runner.graphs, *drafting]))
