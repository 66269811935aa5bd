"""`specbench run`: every (temperature, task, question) is decoded by every method in turn, so machine drift
hits all methods alike, and each finished question is recorded at once."""
from __future__ import annotations

import contextlib
import sys
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from specbench.run.decoder import Decoder
from specbench.run.distributed import run_distributed
from specbench.run.load import LoadLog, LoadMeter, decoding_threads, session_start, warning
from specbench.run.lock import folder_lock
from specbench.run.plan import Checked, RunConfig, RunPlan, plan_run, row_options, validate
from specbench.run.progress import TokenProgress
from specbench.run.records import RECORDS, write_json
from specbench.run.run_info import FOLDER_COSTS
from specbench.run.writer import RunWriter


def run(cfg: RunConfig, checked: Checked | None = None) -> Path:
    """Decode what the run folder still lacks, holding its lock (one writer at a time). checked: what validate
    returned for cfg, when the caller validated it before importing this module (the command line does)."""
    checked = checked or validate(cfg)  # bad input costs one line before the folder is created or locked
    with folder_lock(cfg.out, "run folder"):
        plan = plan_run(cfg, checked)
        if not plan.jobs:  # a finished run, rerun: nothing to load
            tqdm.write(f"nothing to do: every question of this run is in {cfg.out / RECORDS}", file=sys.stderr)
            return cfg.out
        meter = LoadMeter()
        distributed = bool(cfg.workers > 1 or cfg.ray_address)
        # A Ray run's workers choose their threads (start_workers): its warning names none.
        log, threads = session_start(meter, cfg.threads, "as the run started", note=not distributed)
        if distributed:
            return run_distributed(cfg, plan, log)
        torch.set_num_threads(threads)  # before the target loads: run.json's environment records it
        log.threads = threads
        return _run_here(cfg, plan, meter, log)


def _run_here(cfg: RunConfig, plan: RunPlan, meter: LoadMeter, log: LoadLog) -> Path:
    say(cfg, f"specbench: loading {cfg.target} ({len(plan.jobs)} {'question' if cfg.batch_sizes == [1] else 'batch'}"
             f"{'s' if len(plan.jobs) != 1 else ''} to decode)")
    decoder = Decoder(cfg, plan.budgets, idle_threads=decoding_threads(cfg.threads, busy=False))
    decoder.reserve(plan.questions)  # the target's cache, before its costs are measured on it
    costs = decoder.with_bandwidth(plan.costs) if plan.costs else decoder.machine_costs(not log.busy, store=False)
    if plan.costs is None:  # kept for this folder's resumes at once, should this session stop before run.json
        write_json(cfg.out / FOLDER_COSTS, costs.to_dict())
    say(cfg, f"specbench: building {', '.join(m.name for m in plan.methods)} and warming each up (untimed)")
    decoder.setup(plan.methods, costs, plan.questions)
    if plan.costs is None and not log.busy:
        decoder.store_costs(costs)  # once, with the drafting costs the methods measured while being built
    writer = RunWriter(cfg.out, cfg.settings(), decoder.info.environment, costs, [asdict(decoder.info)],
                       row_options(cfg, plan.methods), plan.rerun_keys)
    meter.other_share(wait=True)  # the per-question windows start here, after loading and warm-up
    unread, warned = 0, log.busy  # one warning line per session
    bar = tqdm(plan.jobs, desc="questions" if cfg.batch_sizes == [1] else "batches",
               unit="q" if cfg.batch_sizes == [1] else "batch", disable=not cfg.progress)
    progress = TokenProgress(bar) if cfg.progress else None
    try:
        for job in bar:
            writer.add(decoder.decode(job, progress))
            unread += 1
            share = meter.other_share()
            if share is not None:
                if log.add(share, unread) and not warned:
                    tqdm.write(warning(share, log.cores, f"while {job.describe()} decoded"), file=sys.stderr)
                    warned = True
                unread = 0
    except BaseException:
        with contextlib.suppress(OSError):  # the error in flight is the one to report (a full disk, say)
            writer.write_load(log)
            writer.write_capture(decoder.capture_report())
        raise
    writer.write_load(log)
    writer.write_capture(decoder.capture_report())
    return cfg.out


def say(cfg: RunConfig, line: str) -> None:
    """What a run does in a phase that shows no bar (loading, building, warming up), when it shows progress."""
    if cfg.progress:
        tqdm.write(line, file=sys.stderr)
