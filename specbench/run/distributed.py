"""`run --workers N [--ray-address ADDR]`: the same run decoded by N Ray workers (pip install specbench[distributed]).

Each worker loads the target and every drafter once and decodes whole questions (every method, interleaved, on
one device, so each speedup stays a paired ratio). The driver alone writes the run directory: records stream
back per question and are appended as whole lines; each names its worker's host and device. Every worker decides
with the same fixed costs (measured by worker 0, or the run's own, or --cost-curve), so the same settings give
the same drafts wherever a question lands. A worker that dies loses only the question it was decoding, which goes
to another worker; if every worker dies, finished records stay and the same command resumes.
"""
from __future__ import annotations

import os
from collections import deque
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from specbench.decode.cost_model import CostModel
from specbench.errors import SpecbenchError
from specbench.run.decoder import Decoder
from specbench.run.load import LoadLog, decoding_threads
from specbench.run.plan import Job, RunConfig, RunPlan, row_options
from specbench.run.record import Record
from specbench.run.records import write_json
from specbench.run.run_info import FOLDER_COSTS
from specbench.run.writer import RunWriter

NAMESPACE = "specbench"


class DecodeWorker:
    """A Ray actor around a Decoder (wrapped with ray.remote in start_workers)."""

    def __init__(self, cfg: RunConfig, budgets: dict[str, int], worker: int, threads: int, idle_threads: int) -> None:
        import torch

        if threads > 0:
            torch.set_num_threads(threads)
        self.decoder = Decoder(cfg, budgets, worker, idle_threads or None)

    def info(self) -> dict[str, Any]:
        return asdict(self.decoder.info)

    def machine_costs(self, quiet: bool) -> dict[str, Any]:
        return self.decoder.machine_costs(quiet, store=quiet).to_dict()

    def setup(self, plan: RunPlan, costs: dict[str, Any]) -> None:
        self.decoder.setup(plan.methods, CostModel.from_dict(costs, "the run's costs"), plan.questions)

    def decode(self, job: Job) -> list[Record]:
        return list(self.decoder.decode(job))


def worker_name(index: int) -> str:
    """The Ray actor name of this driver's worker `index` (namespace "specbench")."""
    return f"driver-{os.getpid()}-worker-{index}"


def _ray():
    try:
        import ray
    except ImportError:
        raise SpecbenchError("--workers needs Ray: pip install 'specbench[distributed]'") from None
    return ray


def _unwrap(exc: Exception) -> Exception:
    """A SpecbenchError raised inside a worker (bad input found there) comes back as itself."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, SpecbenchError) else exc


def start_workers(cfg: RunConfig, plan: RunPlan, busy: bool) -> tuple[list[Any], list[dict[str, Any]], CostModel]:
    """The workers, set up with the run's costs (measured by worker 0 unless fixed, stored only when not busy)."""
    ray = _ray()
    if not ray.is_initialized():
        if cfg.ray_address:
            ray.init(address=cfg.ray_address, namespace=NAMESPACE, log_to_driver=False)
        else:
            ray.init(namespace=NAMESPACE, include_dashboard=False, log_to_driver=False)
    gpus = int(ray.cluster_resources().get("GPU", 0))
    cpus = int(ray.cluster_resources().get("CPU", os.cpu_count() or 1))
    if gpus and cfg.device != "cpu":  # one GPU each
        options: dict[str, Any] = {"num_gpus": 1, "num_cpus": 1}
        threads = idle = 0
    else:  # CPU workers share the cluster's cores (--threads each when given; 1 each beside other work)
        threads = decoding_threads(cfg.threads, busy, cfg.workers, cpus)
        idle = decoding_threads(cfg.threads, False, cfg.workers, cpus)  # their stored costs' key, as when idle
        options = {"num_cpus": min(threads, max(1, cpus // cfg.workers))}
    remote = ray.remote(DecodeWorker)
    actors = [remote.options(name=worker_name(i), **options).remote(cfg, plan.budgets, i, threads, idle)
              for i in range(cfg.workers)]
    try:
        infos = ray.get([a.info.remote() for a in actors])
        costs = plan.costs.to_dict() if plan.costs else ray.get(actors[0].machine_costs.remote(not busy))
        if plan.costs is None:  # kept for this folder's resumes at once (specbench.run.run_info.FOLDER_COSTS)
            write_json(cfg.out / FOLDER_COSTS, costs)
        ray.get([a.setup.remote(plan, costs) for a in actors])
    except ray.exceptions.RayError as exc:
        for actor in actors:
            ray.kill(actor)
        raise _unwrap(exc) from None
    return actors, infos, CostModel.from_dict(costs, "the run's costs")


def run_distributed(cfg: RunConfig, plan: RunPlan, log: LoadLog) -> Path:
    """The load is read once, as the run starts (log): the workers are processes of their own, so they would count
    as other work in any later reading."""
    ray = _ray()
    ours = not ray.is_initialized()  # a cluster this run started is shut down with it
    try:
        actors, infos, costs = start_workers(cfg, plan, log.busy)
        try:
            return _decode(cfg, plan, actors, infos, costs, log)
        finally:
            for actor in actors:
                ray.kill(actor)
    finally:
        if ours:
            ray.shutdown()


def _decode(cfg: RunConfig, plan: RunPlan, actors: list[Any], infos: list[dict[str, Any]], costs: CostModel,
            log: LoadLog) -> Path:
    ray = _ray()
    writer = RunWriter(cfg.out, cfg.settings(), infos[0]["environment"], costs, infos,
                       row_options(cfg, plan.methods), plan.rerun_keys)
    writer.write_load(log)
    pending: deque[Job] = deque(plan.jobs)
    idle = list(actors)
    running: dict[Any, tuple[Any, Job]] = {}
    bar = tqdm(total=len(plan.jobs), desc=f"questions ({cfg.workers} workers)", unit="q", disable=not cfg.progress)
    while pending or running:
        while idle and pending:
            actor, job = idle.pop(0), pending.popleft()
            running[actor.decode.remote(job)] = (actor, job)
        if not running:
            break
        [ready], _ = ray.wait(list(running), num_returns=1)
        actor, job = running.pop(ready)
        try:
            records = ray.get(ready)
        except ray.exceptions.RayActorError:  # the worker died: its question goes to another one
            pending.appendleft(job)
            bar.write(f"a worker died while decoding {job.describe()}; requeued")
            continue
        except ray.exceptions.RayError as exc:
            raise _unwrap(exc) from None
        writer.add(records)
        idle.append(actor)
        bar.update()
    bar.close()
    if pending:
        raise SpecbenchError(f"every worker died with {len(pending)} questions left; finished records are kept in "
                             f"{cfg.out}: rerun the same command to resume")
    return cfg.out
