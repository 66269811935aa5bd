"""How a run measures the verification curve T(k) well, or refused: interleaved rounds with the machine's load read
during them, and two checks before a curve may be kept.

A round times every size once (the fastest of a few forwards each), ascending in even rounds and descending in odd
ones, so that drift over a round hits small and large sizes alike. The other processes' share of the CPUs is read
over the rounds; a round that load arrived in is thrown away and measured again (a few times at most). The curve is
each size's fastest over the kept rounds; the machine's spread is the largest disagreement between rounds. A curve
is refused when it falls with k by more than its noise (max(NOISE_FLOOR, spread)), when its rounds disagree by more
than MAX_SPREAD, or when a quick re-probe of T(1) after it disagrees by more than its noise; a refused curve is
measured once more (CostPlan.attempts), and one still refused is never stored (specbench.run.cost_store).
As the curve is each size's fastest over the rounds, a fall that some round contradicts is never larger than the
spread: load shows as spread (refused past MAX_SPREAD), and a fall beyond the noise is one that every round
measured (a runtime whose kernel for k tokens is slower than its kernel for more; refused as well, and said).

Everything here reads the clock only through the callables it is given (the timed forward, the load reading: a run's
measure_cost_model, specbench.run.decoder), so a test can drive it with a fake timer, and nothing here imports torch
(`costs show` answers before torch loads); nothing here runs while decoding. Samples are handed to `keep` after every
timed size, so that an interrupted measurement resumes from the sizes it finished.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

from specbench.decode.cost_model import SIZES, CostCurve, Measurement, noise

MAX_SPREAD = 0.3  # rounds disagreeing by more than this: the machine was not steady enough to keep the curve
BUSY_SHARE = 0.25  # a round during which other processes used more than this share of the CPUs is measured again


@dataclass(frozen=True)
class CostPlan:
    sizes: list[int] = field(default_factory=lambda: list(SIZES))
    rounds: int = 3  # rounds kept
    repeats: int = 2  # timed forwards per size and round (after one untimed), the fastest kept
    busy_share: float = BUSY_SHARE  # 1.0: no round is measured again for load (a run busy at its start)
    redo: int = 3  # rounds that may be measured again because load arrived, per attempt
    attempts: int = 2  # whole measurements before a curve that fails its checks is refused

    def describe(self) -> str:
        redo = (f"rounds with other processes above {self.busy_share:.0%} of the CPUs measured again"
                if self.busy_share < 1 else "no round measured again for load (the run started beside other work)")
        return (f"fastest of {self.repeats} forwards per size after one untimed, in each of {self.rounds} interleaved "
                f"rounds (ascending, then descending), {redo}")


@dataclass
class CostSamples:
    """A measurement in progress: per round the seconds of each size (None: not yet timed) and the other processes'
    share of the CPUs over the round (None: not yet read), the rounds thrown away for load, and the attempt."""
    sizes: list[int]
    repeats: int
    started: str
    attempt: int = 1
    seconds: list[list[float | None]] = field(default_factory=list)
    loads: list[float | None] = field(default_factory=list)
    dropped: list[float] = field(default_factory=list)  # each busy reading's load (its rounds were measured again)
    busy: list[list[float | None]] = field(default_factory=list)  # the rounds those readings threw away

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(raw: Any) -> "CostSamples | None":
        """Samples kept by an interrupted measurement, or None when they are not readable as such."""
        try:
            samples = CostSamples(**raw)
            widths = {len(row) for row in samples.seconds + samples.busy}
            fits = widths <= {len(samples.sizes)} and len(samples.loads) == len(samples.seconds)
        except TypeError:  # not an object of these fields, or fields of other types
            return None
        return samples if fits else None

    def fits(self, plan: CostPlan) -> bool:
        return self.sizes == plan.sizes and self.repeats == plan.repeats

    def kept(self) -> list[list[float]]:
        """The finished rounds whose load was read (rounds thrown away are no longer among them)."""
        return [row for row, load in zip(self.seconds, self.loads)  # type: ignore[misc]
                if load is not None and None not in row]

    def curve(self) -> CostCurve:
        rows = self.kept()
        return CostCurve(list(self.sizes), [min(row[i] for row in rows) for i in range(len(self.sizes))])

    def spread(self) -> float:
        """The largest disagreement between kept rounds at one size, relative to that size's fastest."""
        rows = self.kept()
        return max((max(col) - min(col)) / min(col) for col in zip(*rows)) if len(rows) > 1 else 0.0


def falls(curve: CostCurve, tolerance: float) -> str | None:
    """Where the curve falls with k by more than tolerance (relative), or None: a forward over more tokens never
    costs less, so such a curve was measured while the machine's speed changed."""
    for (a, ta), (b, tb) in zip(zip(curve.sizes, curve.seconds), zip(curve.sizes[1:], curve.seconds[1:])):
        if tb < ta * (1 - tolerance):
            return (f"T({b}) {tb * 1000:.2f} ms is below T({a}) {ta * 1000:.2f} ms by more than the noise "
                    f"({tolerance:.0%})")
    return None


def disagrees(stored: float, probe: float, tolerance: float) -> bool:
    """Two timings of one forward further apart than tolerance, relative to the smaller."""
    return abs(stored - probe) > tolerance * min(stored, probe)


def problem(curve: CostCurve, spread: float, probe: float) -> str | None:
    """Why a measured curve may not be kept, or None."""
    if spread > MAX_SPREAD:
        return f"its rounds disagree by {spread:.0%} (more than {MAX_SPREAD:.0%}: the machine was not steady)"
    fall = falls(curve, noise(spread))
    if fall:
        return f"not monotone: {fall}"
    if disagrees(curve.seconds[0], probe, noise(spread)):
        return (f"T(1) {curve.seconds[0] * 1000:.2f} ms disagrees with a re-probe's {probe * 1000:.2f} ms by more "
                f"than the noise ({noise(spread):.0%})")
    return None


class LoadArrived(Exception):
    """Load arrived in more rounds than a measurement may measure again."""


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class CostWatch:
    """What a measurement reports to. This one reads no load (every round counts as quiet, and the Measurement
    says the load was not read), keeps nothing and shows nothing; specbench.run.cost_store's watches the machine,
    keeps the samples beside the stored costs and shows a progress bar."""
    reads_load = False

    def resume(self, plan: CostPlan) -> CostSamples:
        """The samples an interrupted measurement kept, or new ones."""
        return CostSamples(list(plan.sizes), plan.repeats, utc_now())

    def load(self, wait: bool) -> float | None:
        """The other processes' share of the CPUs since the previous call (None while the window is too short to
        judge, unless wait, which waits it out)."""
        return 0.0

    def keep(self, samples: CostSamples) -> None:
        """Called after every timed size and every load reading."""

    @contextmanager
    def progress(self, total: int, done: int) -> Iterator[Callable[[], None]]:
        """A tick() per timed size, for `total` sizes of which `done` are done."""
        yield lambda: None


@dataclass
class CostRounds:
    """One measurement of the curve: time(k) times a forward over k tokens (the fastest of plan.repeats)."""
    plan: CostPlan
    time: Callable[[int], float]
    watch: CostWatch
    tick: Callable[[], None] = lambda: None

    def measure(self, samples: CostSamples) -> CostSamples:
        """Fill the samples' rounds until plan.rounds are kept (resuming where an interrupted one stopped)."""
        self.watch.load(False)  # the first window opens here
        while True:
            finished = sum(None not in row for row in samples.seconds)
            if samples.seconds and None in samples.seconds[-1]:  # a round an interruption cut
                self.time_round(samples)
            elif finished < self.plan.rounds:
                samples.seconds.append([None] * len(samples.sizes))
                samples.loads.append(None)
                self.time_round(samples)
            elif None in samples.loads:  # the last rounds were too short to read the load over on their own
                self.judge_load(samples, self.watch.load(True))
            else:
                return samples

    def time_round(self, samples: CostSamples) -> None:
        row, index = samples.seconds[-1], len(samples.seconds) - 1
        for i in (range(len(row)) if index % 2 == 0 else reversed(range(len(row)))):
            if row[i] is None:
                row[i] = self.time(samples.sizes[i])
                self.watch.keep(samples)
                self.tick()
        self.judge_load(samples, self.watch.load(False))

    def judge_load(self, samples: CostSamples, share: float | None) -> None:
        """A reading covers every round since the previous one: all kept, or all measured again when busy."""
        if share is None:
            return
        pending = [i for i, load in enumerate(samples.loads) if load is None]
        if share <= self.plan.busy_share:
            for i in pending:
                samples.loads[i] = share
            self.watch.keep(samples)
            return
        for i in reversed(pending):
            samples.busy.append(samples.seconds.pop(i))
            del samples.loads[i]
        samples.dropped.append(share)
        self.watch.keep(samples)
        if len(samples.dropped) > self.plan.redo:
            raise LoadArrived(f"other processes used up to {max(samples.dropped):.0%} of the CPUs during the "
                              f"measurement ({len(samples.dropped)} times past {self.plan.busy_share:.0%})")


def measure_curve(rounds: CostRounds, samples: CostSamples) -> tuple[CostCurve, Measurement]:
    """The curve and how it was measured: rounds until plan.rounds are kept, then T(1) re-probed; a curve that
    fails its checks is measured anew up to plan.attempts times, and comes back with its problem when it still
    fails (its Measurement.problem: the caller may use it for itself, never store it). Load in more rounds than
    plan.redo refuses at once, with the fastest of every finished round, busy ones included."""
    plan = rounds.plan
    while True:
        try:
            rounds.measure(samples)
        except LoadArrived as exc:
            finished = samples.kept() + [row for row in samples.busy if None not in row]
            curve = CostCurve(list(samples.sizes), [min(col) for col in zip(*finished)])
            return curve, measurement(samples, rounds.watch, plan, None, str(exc))
        curve, spread, probe = samples.curve(), samples.spread(), rounds.time(samples.sizes[0])
        trouble = problem(curve, spread, probe)
        if trouble is None or samples.attempt >= plan.attempts:
            return curve, measurement(samples, rounds.watch, plan, probe, trouble)
        samples.seconds, samples.loads, samples.busy = [], [], []
        samples.attempt += 1
        rounds.watch.keep(samples)


def measurement(samples: CostSamples, watch: CostWatch, plan: CostPlan, probe: float | None, trouble: str | None
                ) -> Measurement:
    loads = [x for x in samples.loads if x is not None] if watch.reads_load else []
    return Measurement(utc_now(), samples.started, plan.describe(), loads,
                       list(samples.dropped), samples.spread(), None if probe is None else probe * 1000,
                       samples.attempt, trouble)
