"""`bench --overhead`: the host's work per decode step, per method, batch size and runtime, outside the target's and
the drafters' forwards (drafting's bookkeeping, inputs and masks, verification, emission, cache compaction), and the
points per step where the host would wait for a GPU.

On a GPU a small target's forward replays in well under a millisecond, so a step costs what the host does around it.
This measures that on any machine, a CPU included (the CPU proxy): the methods decode through the engine exactly as
`run` does (`generate_batch` with the target's runner, at fixed shapes with `--graphs on`), on a model of the default
target's depth at tiny width (`shape:smollm2-135m-tiny`, random weights: what it emits means nothing; the trained
methods get random drafters of its shape, so acceptance means nothing either, while the host's work per step is
that of a real step), one thread, T=0, no stop token (every row decodes its whole budget).

- Host time: process CPU time (`time.process_time`) from the end of the first step (the prefill) to the end of the
  last, less the CPU time inside forwards (specbench.measure.host_waits.ForwardClock: the target's, every drafter's
  heads and draft models), per step; the fastest of `rounds` generations. Process CPU time counts only this
  process's work, so a machine shared with other jobs disturbs it less than wall time (caches and memory bandwidth
  are still shared); the wall-time figure is kept beside it. On the CPU the tensor work outside forwards (the
  logits' copies, a random head's top-k over the whole vocabulary) is host time too, where a GPU would queue it.
- Freed memory stays in the process on a CPU (`keep_freed_memory`), as a GPU's caching allocator keeps it: glibc
  otherwise returns every freed block over 32 MB to the OS and faults it in again at the next step, and a batch's
  tree logits are that large (64 rows x 17 positions x 49,152 fp32: 214 MB), which cost eagle ~13 ms a step at B=64
  outside its forwards here, work no GPU run does. The header says whether it was set.
- Host-blocking points and torch calls: counted in one more generation under host_waits.SyncCounter, which runs
  every call as it was made (the same tokens: checked); what counts as a wait, and how the CPU proxy tells the
  tensors a GPU run would keep on the host: that module's docstring.
- Function calls ("py calls"): every call outside forwards, Python's and builtins' (torch's included), counted in
  one more generation (host_waits.CallCounter). Unlike host time, no other job, clock or cache state moves it: on
  the CPU a bigger step's forward (eagle's tree logits at B=64: 214 MB) evicts what the host touches next, so the
  host time a row adds grows with the forward's size as well as with the host's own work, which a GPU's host would
  not see; the count follows the host's own work only.
"""
from __future__ import annotations

import copy
import ctypes
import ctypes.util
import math
import time
from collections import Counter
from dataclasses import asdict, dataclass, fields
from typing import Callable, Iterator

import torch

from specbench.decode.costs import cpu_description
from specbench.decode.draft import Drafter
from specbench.decode.engine import generate_batch
from specbench.decode.names import Runtime
from specbench.decode.sampling import Sampling
from specbench.decode.target import LoadedModel
from specbench.errors import SpecbenchError
from specbench.measure.host_waits import KINDS, CallCounter, Counts, ForwardClock, SyncCounter
from specbench.method import BuildContext, MethodInfo

OVERHEAD_TARGET = "shape:smollm2-135m-tiny"
# Eagle's and eagle3's trees are fixed in size (total_tokens=auto would size them from this machine's costs)
OVERHEAD_METHODS = ("vanilla", "pld", "eagle@total_tokens=16", "eagle3@total_tokens=16", "medusa", "hydra", "sps")
OVERHEAD_BATCHES = (1, 4, 64)
OVERHEAD_RUNTIMES = (Runtime(graphs="off"), Runtime(graphs="on"))  # own shapes and fixed (bucketed) shapes
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)


def keep_freed_memory() -> bool:
    """Freed memory stays in this process from now on (glibc's mallopt: no block is mmap'ed, the heap is never
    trimmed), as a GPU's caching allocator keeps it; False where the C library is not glibc (nothing set)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = libc.mallopt if libc is not None else None
    except (OSError, AttributeError):
        return False
    return mallopt is not None and mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1


@dataclass
class Mark:
    """The clocks and counters at the end of a step."""
    cpu: float
    wall: float
    forward_cpu: float
    forward_wall: float
    counts: Counts


@dataclass
class Window:
    """A generation from the end of its first step (the prefill) to the end of its last."""
    tokens: list[list[int]]
    first: Mark
    last: Mark
    steps: int

    @classmethod
    def of(cls, tokens: list[list[int]], marks: list[Mark], method: str) -> Window:
        if len(marks) < 2:
            raise SpecbenchError(f"bench --overhead: {method} decoded its tokens in one step; measuring needs two "
                                 "or more (raise --max-new-tokens)")
        return cls(tokens, marks[0], marks[-1], len(marks) - 1)

    def host_cpu(self) -> float:
        """Seconds of process CPU time per step outside forwards."""
        return (self.last.cpu - self.first.cpu - (self.last.forward_cpu - self.first.forward_cpu)) / self.steps

    def host_wall(self) -> float:
        return (self.last.wall - self.first.wall - (self.last.forward_wall - self.first.forward_wall)) / self.steps

    def forward_cpu(self) -> float:
        return (self.last.forward_cpu - self.first.forward_cpu) / self.steps

    def per_step(self, counter: Callable[[Counts], Counter]) -> dict[str, float]:
        first, last = counter(self.first.counts), counter(self.last.counts)
        return {k: (last[k] - first[k]) / self.steps for k in sorted(last)}


@dataclass
class Overhead:
    """One cell: a method at a batch size on a runtime; figures per step, after the first (the prefill)."""
    method: str
    runtime: str
    batch: int
    steps: int  # steps measured
    host_ms: float  # process CPU time outside forwards (the fastest of the rounds)
    host_wall_ms: float  # wall time outside forwards, in the same generation
    forward_ms: float  # process CPU time inside forwards, in the same generation
    d2h: float  # host-blocking points outside forwards, by kind
    h2d: float
    shape: float
    blocking_in_forwards: float  # inside the target's and drafters' forwards (all kinds)
    torch_calls: float  # outside forwards
    top_calls: dict[str, float]  # the most frequent torch calls outside forwards
    blocking_calls: dict[str, float]  # "kind name" -> per step, outside forwards
    same_tokens: bool  # the counted generations emitted the timed ones' tokens
    python_calls: float = float("nan")  # function calls outside forwards (CallCounter; nan: a record made before it)

    @property
    def blocking(self) -> float:
        return self.d2h + self.h2d + self.shape


def marked_generation(target: LoadedModel, drafters: list[Drafter], prompt: list[int], tokens: int,
                      clock: ForwardClock, method: str, counter: SyncCounter | CallCounter | None = None
                      ) -> Window:
    """One generation of len(drafters) rows, the clocks and counters read at the end of every step."""
    marks: list[Mark] = []
    counts = counter.counts if counter else Counts()

    def mark(_: int) -> None:
        marks.append(Mark(time.process_time(), time.perf_counter(), clock.cpu, clock.wall, copy.deepcopy(counts)))

    results = generate_batch(target.model, [prompt] * len(drafters), drafters, Sampling(), tokens, set(),
                             on_step=mark, runner=target.runner)
    return Window.of([g.token_ids for g in results], marks, method)


def measure_cell(target: LoadedModel, info: MethodInfo, drafter: Drafter, prompt: list[int], batch: int, tokens: int,
                 rounds: int) -> Overhead:
    """A method at one batch size: a warm-up of the whole budget (a shorter one leaves the caches' growth to the
    first timed generation), `rounds` timed generations (the fastest kept), one counted, one with its function
    calls counted."""
    drafters = [drafter] + [drafter.fork() for _ in range(batch - 1)]
    with ForwardClock(target.model.device) as clock:
        generate_batch(target.model, [prompt] * batch, drafters, Sampling(), tokens, set(),
                       runner=target.runner)  # warm-up
        timed = [marked_generation(target, drafters, prompt, tokens, clock, info.name) for _ in range(rounds)]
        with SyncCounter(target.model.device, clock) as counter:
            counted = marked_generation(target, drafters, prompt, tokens, clock, info.name, counter)
        with CallCounter(clock) as calls_counter:
            traced = marked_generation(target, drafters, prompt, tokens, clock, info.name, calls_counter)
    best = min(timed, key=Window.host_cpu)
    blocking = counted.per_step(lambda c: c.outside)
    calls = counted.per_step(lambda c: c.calls)
    return Overhead(info.name, target.runtime.name if target.runtime else "stock", batch, best.steps,
                    1000 * best.host_cpu(), 1000 * best.host_wall(), 1000 * best.forward_cpu(),
                    *(sum(v for k, v in blocking.items() if k.startswith(f"{kind} ")) for kind in KINDS),
                    sum(counted.per_step(lambda c: c.inside).values()), sum(calls.values()),
                    dict(sorted(calls.items(), key=lambda kv: -kv[1])[:12]), blocking,
                    all(t.tokens == counted.tokens for t in [*timed, traced]),
                    (traced.last.counts.python - traced.first.counts.python) / traced.steps)


def overhead_benchmark(targets: Iterator[LoadedModel], methods: list[MethodInfo], prompt: list[int],
                       batches: tuple[int, ...], tokens: int, rounds: int,
                       on_cell: Callable[[Overhead], None] | None = None) -> list[Overhead]:
    """Every method at every batch size, on each target (one per runtime, loaded in turn)."""
    rows = []
    for target in targets:
        context = BuildContext(target)
        for info in methods:
            drafter = info.drafter(context)
            for batch in batches:
                rows.append(measure_cell(target, info, drafter, prompt, batch, tokens, rounds))
                if on_cell is not None:
                    on_cell(rows[-1])
    return rows


def overhead_header(target: LoadedModel, prompt: int, tokens: int, rounds: int, kept_memory: bool) -> str:
    """The setting, in words: the model, the machine, the prompt's and generation's lengths, what is counted,
    whether freed memory stayed in the process (keep_freed_memory)."""
    model = target.model
    memory = ("freed memory kept in the process (glibc mallopt), as a GPU's caching allocator keeps it" if kept_memory
              else "freed memory returned to the OS (the allocator's default)")
    return (f"target {target.name} ({model.config.num_hidden_layers} layers, hidden {model.config.hidden_size}), "
            f"{model.device} {str(model.dtype).removeprefix('torch.')}, {torch.get_num_threads()} thread(s), "
            f"{cpu_description()}; T=0, a {prompt}-token prompt, {tokens} new tokens per row, no stop token; "
            f"host = process CPU time outside forwards per step after the prefill, the fastest of {rounds}; blocking "
            "points, torch calls and function calls per step outside forwards (d2h/h2d/shape: docs/measuring.md); "
            f"{memory}")


COLUMNS = (("method", 24, "s"), ("runtime", 10, "s"), ("B", 4, "d"), ("steps", 6, "d"), ("host ms", 9, ".2f"),
           ("wall ms", 9, ".2f"), ("fwd ms", 9, ".2f"), ("blocking", 9, ".1f"), ("d2h", 6, ".1f"), ("h2d", 6, ".1f"),
           ("shape", 6, ".1f"), ("in fwd", 7, ".1f"), ("torch calls", 12, ".0f"), ("py calls", 9, ".0f"))


def overhead_values(r: Overhead) -> list[str]:
    values = (r.method, r.runtime, r.batch, r.steps, r.host_ms, r.host_wall_ms, r.forward_ms, r.blocking, r.d2h,
              r.h2d, r.shape, r.blocking_in_forwards, r.torch_calls, r.python_calls)
    return ["-" if isinstance(v, float) and math.isnan(v) else f"{v:{f}}" for v, (_, _, f) in zip(values, COLUMNS)]


def aligned(cells: list[str]) -> str:
    return "".join(c.ljust(w) if f == "s" else c.rjust(w) for c, (_, w, f) in zip(cells, COLUMNS))


def overhead_line(r: Overhead) -> str:
    """A cell's line of the printed table."""
    return aligned(overhead_values(r))


def added_per_row(rows: list[Overhead]) -> list[str]:
    """Per method and runtime, what one more row adds to a step, between the two largest batch sizes measured: host
    time, then function calls and torch calls (where the records count them), each against vanilla's on the same
    runtime where vanilla was measured."""
    cells = {(r.method, r.runtime, r.batch): r for r in rows}
    batches = sorted({r.batch for r in rows})
    if len(batches) < 2:
        return []
    low, high = batches[-2:]
    measured = [(m, rt) for m, rt, b in cells if b == high and (m, rt, low) in cells]
    slope = {name: {(m, rt): (getattr(cells[m, rt, high], name) - getattr(cells[m, rt, low], name)) / (high - low)
                    for m, rt in measured} for name in ("host_ms", "python_calls", "torch_calls")}

    def figure(name: str, method: str, runtime: str, form: str) -> tuple[str, str]:
        """One more row's `name` (an Overhead figure), and against vanilla's where vanilla was measured."""
        ours, base = slope[name][method, runtime], slope[name].get(("vanilla", runtime))
        return f"{ours:{form}}", f" ({ours / base:.2f}x vanilla's)" if base and method != "vanilla" else ""

    lines = []
    for method, runtime in measured:
        ms, versus = figure("host_ms", method, runtime, ".2f")
        line = f"{method} on {runtime}: {ms} host ms per added row from B={low} to B={high}{versus}"
        if not math.isnan(slope["python_calls"][method, runtime]):  # nan: records from before the count
            calls, calls_versus = figure("python_calls", method, runtime, ".1f")
            torch_calls, torch_versus = figure("torch_calls", method, runtime, ".1f")
            line += f"; {calls} function calls{calls_versus}, {torch_calls} torch calls{torch_versus}"
        lines.append(line)
    return lines


def overhead_summary(rows: list[Overhead]) -> list[str]:
    """What follows the cells: the host time per added row, and a warning where counting changed the tokens."""
    lines = added_per_row(rows)
    if not all(r.same_tokens for r in rows):
        lines.append("WARNING: a counted generation emitted other tokens than its timed ones: "
                     + ", ".join(f"{r.method} B={r.batch} {r.runtime}" for r in rows if not r.same_tokens))
    return lines


def overhead_table(rows: list[Overhead]) -> str:
    """The table as printed: its head, one line per cell, columns aligned; then the summary."""
    return "\n".join([aligned([n for n, _, _ in COLUMNS]), *map(overhead_line, rows), *overhead_summary(rows)])


def overhead_markdown(rows: list[Overhead], header: str, command: str) -> str:
    """The report: its command, the setting, the table and the host time per added row (markdown)."""
    names = [n for n, _, _ in COLUMNS]
    lines = ["# Host work per decode step (`bench --overhead`)", "", f"Command: `{command}`", "", header, "",
             "| " + " | ".join(names) + " |", "|" + "|".join("---" for _ in names) + "|",
             *("| " + " | ".join(overhead_values(r)) + " |" for r in rows), "",
             *(f"- {line}" for line in overhead_summary(rows))]
    return "\n".join(lines) + "\n"


def overhead_records(rows: list[Overhead], header: str, command: str) -> dict:
    """What overhead.json holds: the command, the setting and every cell."""
    return {"command": command, "setting": header, "threads": torch.get_num_threads(), "cpu": cpu_description(),
            "cells": [{**asdict(r), "blocking": r.blocking} for r in rows]}


def read_overhead(records: dict) -> list[Overhead]:
    """The cells of an overhead.json (overhead_records)."""
    names = {f.name for f in fields(Overhead)}
    return [Overhead(**{k: v for k, v in cell.items() if k in names}) for cell in records["cells"]]
