"""How busy the machine is with OTHER work: the CPU time other processes used between two readings, as a share of
all cores. Timings taken beside other work are not comparable (a busy neighbour once turned medusa's 1.0x into
2.24x on one question), so a run reads this when it starts and after every question and says so when it is high;
when it is high at the start, the run decodes with one thread per process (decoding_threads) unless told otherwise.

Only the run's own process is subtracted: a Ray run's workers count as other work, so a distributed run reads the
load once, before its workers start. Nothing here decides what gets drafted.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil
from tqdm import tqdm

from specbench.run.records import utc_now

BUSY_SHARE = 0.25  # other processes using more than this share of all cores: timings are beside other work
MIN_WINDOW = 0.5  # seconds: a shorter reading is too noisy to judge


def _busy_seconds(times: Any) -> float:
    """Non-idle CPU time (Linux counts guest time inside user and nice already)."""
    waiting = ("idle", "iowait", "guest", "guest_nice")
    return sum(times) - sum(getattr(times, name, 0.0) for name in waiting)


def _own_seconds(process: psutil.Process) -> float:
    t = process.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


class LoadMeter:
    """Reads the share of the CPUs that other processes used since the previous reading."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._cores = psutil.cpu_count() or 1
        self._mark()

    def _mark(self) -> None:
        self._wall = time.monotonic()
        self._busy = _busy_seconds(psutil.cpu_times())
        self._own = _own_seconds(self._process)

    def other_share(self, wait: bool = False) -> float | None:
        """Other processes' CPU time over wall time times cores since the window opened, then a new window; None
        while the window is shorter than MIN_WINDOW (it stays open), unless wait, which waits it out."""
        waited = time.monotonic() - self._wall
        if waited < MIN_WINDOW:
            if not wait:
                return None
            time.sleep(MIN_WINDOW - waited)
        wall, busy, own = time.monotonic(), _busy_seconds(psutil.cpu_times()), _own_seconds(self._process)
        share = max(0.0, (busy - self._busy) - (own - self._own)) / ((wall - self._wall) * self._cores)
        self._wall, self._busy, self._own = wall, busy, own
        return min(share, 1.0)


@dataclass
class LoadLog:
    """One session of a run: the other processes' share of the CPUs when it started and per question."""
    started: str
    cores: int = field(default_factory=lambda: psutil.cpu_count() or 1)
    threshold: float = BUSY_SHARE
    at_start: float = 0.0
    questions: int = 0  # jobs (questions, or batches) decoded in this session
    busy_questions: int = 0
    max_share: float = 0.0
    threads: int | None = None  # torch threads the session decoded with (a Ray run's workers: their environments)

    def add(self, share: float, questions: int) -> bool:
        """Log a reading taken over `questions` jobs; True when it was busy."""
        self.questions += questions
        self.max_share = max(self.max_share, share)
        busy = share > self.threshold
        self.busy_questions += questions if busy else 0
        return busy

    @property
    def busy(self) -> bool:
        return self.at_start > self.threshold or self.busy_questions > 0

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        for key in ("at_start", "max_share"):
            values[key] = round(values[key], 3)
        return values


def warning(share: float, cores: int, where: str, threads: str = "") -> str:
    """The one warning line of a busy reading; `threads` says what the run does about it (threads_note)."""
    return (f"specbench: warning: other processes used {share:.0%} of the {cores} CPUs {where}: timings taken "
            f"beside other work are not comparable (noted in run.json and the report header){threads}")


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which taskset or a container narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def decoding_threads(requested: int | None, busy: bool, processes: int = 1, cores: int | None = None) -> int:
    """Torch threads per decoding process: --threads when given, else OMP_NUM_THREADS when set; else 1 when other
    work holds the cores at the start (with more threads than free cores, every forward waits for the slowest
    thread; docs/running.md "Threads"); else the usable cores (or `cores`, a cluster's) shared between the
    `processes`."""
    if requested is None and os.environ.get("OMP_NUM_THREADS", "").isdigit():
        requested = int(os.environ["OMP_NUM_THREADS"]) or None
    if requested is not None:
        return requested
    return 1 if busy else max(1, (cores or usable_cores()) // processes)


def threads_note(threads: int) -> str:
    """What the start warning adds: the threads each process decodes with."""
    return f"; decoding with {threads} thread{'s' if threads > 1 else ''} per process (--threads N to choose)"


def describe(logs: list[dict[str, Any]]) -> str | None:
    """The report header's line for a run whose sessions saw other work, or None."""
    def busy_start(log: dict[str, Any]) -> bool:
        return log.get("at_start", 0) > log.get("threshold", BUSY_SHARE)

    busy = [log for log in logs if busy_start(log) or log.get("busy_questions", 0) > 0]
    if not busy:
        return None
    worst = max(max(log.get("at_start", 0), log.get("max_share", 0)) for log in busy)
    counted = sum(log.get("busy_questions", 0) for log in busy)
    total = sum(log.get("questions", 0) for log in logs)
    start = ", and at the start" if any(busy_start(log) for log in busy) else ""
    return (f"WARNING: timed beside other work: other processes used up to {worst:.0%} of the CPUs "
            f"({counted} of {total} questions past {busy[0].get('threshold', BUSY_SHARE):.0%}{start})")


def session_start(meter: LoadMeter, requested: int | None, where: str, note: bool = True) -> tuple[LoadLog, int]:
    """The load as a session starts (one reading of `meter`, which goes on reading the session), the torch threads
    it decodes with (decoding_threads), and its one warning line on stderr when other work holds the CPUs (`note`:
    the line says the threads chosen). `run` and the API's load_target both start this way."""
    log = LoadLog(started=utc_now(), at_start=meter.other_share(wait=True) or 0.0)
    threads = decoding_threads(requested, log.busy)
    if log.busy:
        tqdm.write(warning(log.at_start, log.cores, where, threads_note(threads) if note else ""), file=sys.stderr)
    return log, threads
