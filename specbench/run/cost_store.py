"""This machine's stored costs: the first idle run on a machine, target, dtype, runtime and thread count measures
them and every later run there reuses them (specbench.decode.cost_model says why), after checking them.

A stored curve is reused when it is still monotone within its noise and, on a machine idle as the run starts, when
a quick probe of T(1) agrees with its T(1) within the machine's spread (max(NOISE_FLOOR, the spread between its
rounds)); otherwise the run says so in one line and measures anew. A measurement reads the load during its rounds
(specbench.run.cost_rounds), keeps its samples beside the stored costs after every timed size (an interrupted
one resumes from them) and shows a progress bar; a curve it refuses is never stored.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

from tqdm import tqdm

from specbench.cache import cache_root
from specbench.decode.cost_model import NOISE_FLOOR, CostModel
from specbench.errors import SpecbenchError
from specbench.run.cost_rounds import CostPlan, CostSamples, CostWatch, disagrees, falls
from specbench.run.load import LoadMeter
from specbench.run.records import write_json


@dataclass(frozen=True)
class Machine:
    """What a measured cost model is valid for. Runs on the same machine reuse its stored costs, so a busy
    neighbour during one run's start cannot move what that run drafts; another machine measures its own."""
    target: str
    device: str  # "cpu: <model> [flags]" or "cuda: <GPU name>"
    dtype: str
    runtime: str
    threads: int
    torch: str
    transformers: str

    def path(self) -> Path:
        digest = hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]
        return cost_store() / f"{digest}.json"

    def samples_path(self) -> Path:
        """Where a measurement in progress keeps its samples (removed when it finishes)."""
        return self.path().with_suffix(".samples.json")


def cost_store() -> Path:
    """Where measured costs are kept: cache_root()/costs."""
    return cache_root() / "costs"


def read_stored_costs(machine: Machine) -> CostModel | None:
    path = machine.path()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SpecbenchError(f"{path}: unreadable stored costs ({exc}); delete it to measure anew") from None
    return CostModel.from_dict(raw.get("costs") if isinstance(raw, dict) else None, str(path))


def store_costs(machine: Machine, costs: CostModel) -> str | None:
    """Keep the costs for later runs on this machine; returns a warning when that is not possible (a read-only
    home), in which case each run measures its own. A curve that failed its checks (said when it was measured),
    or falls with k beyond its noise (a warning), is never stored."""
    path = machine.path()
    trouble = unusable(costs)
    if trouble:
        refused = costs.measured is not None and costs.measured.problem
        return None if refused else f"specbench: warning: the costs are not stored in {path}: {trouble}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"machine": asdict(machine), "costs": replace(costs, source=None).to_dict()})
    except OSError as exc:
        return f"specbench: warning: cannot store the costs in {path} ({exc.strerror}): later runs measure anew"
    return None


def unusable(costs: CostModel) -> str | None:
    """Why a curve may not be stored or reused: its measurement refused it, or it falls with k beyond its noise
    (a curve stored before curves were checked, or written by hand)."""
    measured = costs.measured
    if measured is not None and measured.problem:
        return f"refused when measured: {measured.problem}"
    fall = falls(costs.verify, measured.noise if measured else NOISE_FLOOR)
    return f"not monotone: {fall}" if fall else None


class MachineWatch(CostWatch):
    """A measurement on this machine: the other processes' load read during its rounds, its samples kept beside
    the stored costs after every timed size, a progress bar on stderr."""
    reads_load = True

    def __init__(self, machine: Machine, progress: bool = True) -> None:
        self.machine, self.show = machine, progress
        self.meter = LoadMeter()
        self.bar: tqdm | None = None
        self.rounds = CostPlan().rounds

    def resume(self, plan: CostPlan) -> CostSamples:
        self.rounds = plan.rounds
        path = self.machine.samples_path()
        with contextlib.suppress(OSError, ValueError):
            kept = CostSamples.from_dict(json.loads(path.read_text(encoding="utf-8")))
            if kept is not None and kept.fits(plan):
                done = sum(x is not None for row in kept.seconds for x in row)
                tqdm.write(f"resuming the cost measurement of {kept.started} ({done} sizes timed, kept in {path})",
                           file=sys.stderr)
                return kept
        return super().resume(plan)

    def load(self, wait: bool) -> float | None:
        return self.meter.other_share(wait)

    def keep(self, samples: CostSamples) -> None:
        if self.bar is not None:  # rounds measured again for load, or a second attempt, lengthen the bar
            left = sum(row.count(None) for row in samples.seconds)
            left += len(samples.sizes) * max(0, self.rounds - len(samples.seconds))
            self.bar.total = max(self.bar.total, self.bar.n + left)
        path = self.machine.samples_path()
        with contextlib.suppress(OSError):  # a read-only cache: an interruption then loses the samples, no more
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, samples.to_dict())

    def finish(self) -> None:
        self.machine.samples_path().unlink(missing_ok=True)

    @contextlib.contextmanager
    def progress(self, total: int, done: int) -> Iterator[Callable[[], None]]:
        with tqdm(total=total, initial=min(done, total), desc="measuring costs", unit="size", file=sys.stderr,
                  disable=not self.show, leave=False) as self.bar:
            yield self.bar.update


Measure = Callable[[MachineWatch, CostPlan], CostModel]  # measures the curve as the plan says, reporting to the watch
BESIDE_OTHER_WORK = "the machine was busy as the run started"


def machine_costs(machine: Machine, measure: Measure, probe: Callable[[], float], anew: bool, quiet: bool,
                  say: Callable[[str], None]) -> CostModel:
    """The costs a run on this machine decides with, their `source` saying where they came from: the stored ones
    when they are usable and (quiet: the machine was idle as the run started) a probe of T(1) agrees with them;
    else measured now (anew: --measure-costs), with `say`ing why in one line. A fresh curve that is refused is
    used by this run alone, never stored; where a stored one exists the run keeps that instead. A run busy at its
    start measures its rounds once each (load is expected: none is measured again) for itself alone."""
    path = machine.path()
    stored = None if anew else read_stored_costs(machine)
    if stored is not None:
        trouble = unusable(stored)
        if trouble:
            say(f"specbench: the stored costs in {path} are not used ({trouble}): measuring anew")
            stored = None
    if stored is not None:
        when = f"measured {stored.measured.finished}" if stored.measured else "measured before measurements were described"
        if not quiet:
            return replace(stored, source=f"stored: {path} ({when}; not re-probed: the machine was busy at the start)")
        t1, noise = stored.verify.seconds[0], stored.measured.noise if stored.measured else NOISE_FLOOR
        now = probe()
        if not disagrees(t1, now, noise):
            return replace(stored, source=f"stored: {path} ({when}; T(1) {t1 * 1000:.2f} ms, {now * 1000:.2f} ms "
                                          f"probed at the start)")
        say(f"specbench: the stored T(1) {t1 * 1000:.2f} ms ({path}) disagrees with {now * 1000:.2f} ms probed now "
            f"by more than the machine's spread ({noise:.0%}): measuring anew")
    say("specbench: measuring this machine's costs (kept for later runs when the machine is idle)")
    watch = MachineWatch(machine)
    costs = measure(watch, CostPlan() if quiet else CostPlan(busy_share=1.0, attempts=1))
    watch.finish()
    if not quiet and costs.measured is not None and costs.measured.problem is None:
        costs = replace(costs, measured=replace(costs.measured, problem=BESIDE_OTHER_WORK))
    refused = costs.measured.problem if costs.measured else None
    if refused is None:
        return replace(costs, source=f"measured at the run's start (for {path})")
    kept = f"this run keeps the stored ones ({path})" if stored else "this run alone decides with it"
    say(f"specbench: warning: the cost curve measured now is refused ({refused}): not stored; {kept}")
    if stored:
        return replace(stored, source=f"stored: {path} (a new measurement was refused: {refused})")
    return replace(costs, source=f"measured at the run's start, refused for storing: {refused}")


def stored_costs() -> list[tuple[Path, dict, CostModel | str]]:
    """Every stored cost file: (path, the machine it is for, its costs or why they cannot be read)."""
    found = []
    for path in sorted(cost_store().glob("*.json")) if cost_store().is_dir() else []:
        if path.name.endswith(".samples.json"):
            continue
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            found.append((path, raw.get("machine") or {}, CostModel.from_dict(raw.get("costs"), str(path))))
        except (OSError, ValueError, AttributeError, SpecbenchError) as exc:
            found.append((path, {}, f"unreadable ({exc})"))
    return found


def describe_costs(path: Path, machine: dict, costs: CostModel | str) -> list[str]:
    """`costs show`'s lines for one stored file."""
    keys = ("target", "device", "dtype", "runtime", "threads", "torch", "transformers")
    lines = [str(path), "  " + ", ".join(f"{k} {machine[k]}" for k in keys if k in machine)]
    if isinstance(costs, str):
        return [*lines, f"  {costs}"]
    curve = costs.verify
    lines.append("  T(k) ms: " + "  ".join(f"{k}: {s * 1000:.2f}" for k, s in zip(curve.sizes, curve.seconds)))
    if costs.drafting:
        lines.append("  drafting ms: " + "  ".join(f"{k}: {s * 1000:.3f}" for k, s in costs.drafting.items()))
    lines.append("  " + (costs.measured.describe() if costs.measured else
                         "measured before specbench recorded when, how and under what load"))
    trouble = unusable(costs)
    return [*lines, f"  NOT USED by runs: {trouble}"] if trouble else lines


def refresh_costs(machine: Machine, measure: Measure) -> tuple[CostModel | None, CostModel]:
    """Measure this machine's costs anew and replace the stored ones (their drafting costs go: the next run's
    methods measure theirs again); a refused curve replaces nothing (SpecbenchError, after `measure`)."""
    try:
        old = read_stored_costs(machine)
    except SpecbenchError:  # an unreadable file is what a refresh replaces
        old = None
    watch = MachineWatch(machine)
    new = measure(watch, CostPlan())
    watch.finish()
    refused = new.measured.problem if new.measured else None
    if refused:
        kept = "the stored costs are kept" if old else "nothing is stored"
        raise SpecbenchError(f"the curve measured now is refused ({refused}); {kept} ({machine.path()})")
    problem = store_costs(machine, new)
    if problem:
        raise SpecbenchError(problem.removeprefix("specbench: warning: "))
    return old, new
