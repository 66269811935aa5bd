"""`bench --overhead`: the host's work per decode step, per method, batch size and runtime, outside the target's and
the drafters' forwards (drafting's bookkeeping, inputs and masks, verification, emission, cache compaction), and the
points per step where the host would wait for a GPU.

On a GPU a small target's forward replays in well under a millisecond, so a step costs what the host does around it.
This measures that on any machine, a CPU included (the CPU proxy): the methods decode through the engine exactly as
`run` does (`generate_batch` with the target's runtime, its static cache on `compiled`), on a model of the default
target's depth at tiny width (`shape:smollm2-135m-tiny`, random weights: what it emits means nothing; the trained
methods get random drafters of its shape, so acceptance means nothing either and the host's work is that of
rejected drafts), one thread, T=0, no stop token (every row decodes its whole budget).

- Host time: process CPU time (`time.process_time`) from the end of the first step (the prefill) to the end of the
  last, less the CPU time inside forwards, per step; the fastest of `rounds` generations. A forward is an outermost
  `nn.Module` call, bracketed by torch's global module hooks: the target's, and every drafter's heads and draft
  models. Process CPU time counts only this process's work, so a machine shared with other jobs disturbs it less
  than wall time (caches and memory bandwidth are still shared); the wall-time figure is kept beside it.
- Host-blocking points: counted in one more generation under a `TorchFunctionMode` that calls every torch function
  as it was called (same tokens: checked), classified by `blocking_kind`: a device-to-host copy (`.item()`,
  `.tolist()`, `int()`/`float()`/`bool()` of a tensor, `.cpu()`, `.numpy()`), a blocking host-to-device copy
  (`torch.tensor`/`as_tensor`/`new_tensor` of Python data, indexing with a Python list, `.to(device)` without
  `non_blocking` from pinned memory), or an output whose size depends on the data (`nonzero`, a boolean-mask index,
  ...: the host waits for the device to know the shape). On CUDA a tensor counts when it is on the model's device.
  On the CPU proxy every tensor is taken to live on the device (the code is written for the model's device, which
  is the CPU here) and every `.to(device)` with a device to bring host data over: an upper bound where code moves a
  tensor already on the device.
- Torch calls: torch functions called outside forwards (attribute reads such as `.shape` not counted): the launches
  a step makes outside any captured graph.
"""
from __future__ import annotations

import copy
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils.weak import WeakIdKeyDictionary

from specbench.decode.costs import cpu_description
from specbench.decode.draft import Drafter
from specbench.decode.engine import generate_batch
from specbench.decode.runtime import synchronize
from specbench.decode.sampling import Sampling
from specbench.decode.target import LoadedModel
from specbench.errors import SpecbenchError
from specbench.method import BuildContext, MethodInfo

OVERHEAD_TARGET = "shape:smollm2-135m-tiny"
# Eagle's and eagle3's trees are fixed in size (total_tokens=auto would size them from this machine's costs)
OVERHEAD_METHODS = ("vanilla", "pld", "eagle@total_tokens=16", "eagle3@total_tokens=16", "medusa", "hydra", "sps")
OVERHEAD_BATCHES = (1, 4, 64)
OVERHEAD_RUNTIMES = ("fast", "compiled")  # the growing cache and the static one: each decode path once
KINDS = ("d2h", "h2d", "shape")

D2H = {"item", "tolist", "__int__", "__float__", "__bool__", "__index__", "__complex__", "cpu", "numpy"}
FROM_HOST = {"tensor", "as_tensor", "asarray"}
FACTORIES = {"zeros", "ones", "empty", "full", "arange", "range", "linspace", "eye", "rand", "randn", "randint",
             "randperm", "empty_strided"}
SHAPE = {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "bincount", "histc"}
INDEXING = {"__getitem__", "__setitem__", "index_put", "index_put_"}


def short_name(func: Callable) -> str:
    """`torch.Tensor.item` -> `item`, `torch.tensor` -> `tensor`."""
    return (resolve_name(func) or getattr(func, "__name__", repr(func))).rpartition(".")[2]


def tensors_in(values: Any) -> list[torch.Tensor]:
    """The tensors among values (a call's arguments or output), one level of lists and tuples deep."""
    found = []
    for v in values if isinstance(values, (list, tuple)) else (values,):
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(t for t in v if isinstance(t, torch.Tensor))
    return found


def python_data(index: Any) -> bool:
    """An index holding a Python list (sent to the device before indexing)."""
    return any(isinstance(p, list) for p in (index if isinstance(index, tuple) else (index,)))


def named_device(args: tuple, kwargs: dict) -> torch.device | None:
    """The device a `.to(...)` call names, if any."""
    for value in (*args[1:], kwargs.get("device")):
        if isinstance(value, (torch.device, str)):
            return torch.device(value)
        if isinstance(value, torch.Tensor):
            return value.device
    return None


class Residence:
    """Which tensors live on the host and which on `device`. On an accelerator, their own device says. On the CPU
    proxy every tensor is on the CPU, so the host tensors are tracked as a GPU run would have them: made from
    Python data or by a factory without a device, brought over by `.cpu()`/`.numpy()`, or computed from host
    tensors alone; everything else (the models, what drafters and the engine build on the model's device, and what
    is computed from it) counts as on the device, and `.to(device)` brings a tensor there (on the CPU it returns
    the tensor itself, which then counts as on the device)."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.proxy = device, device.type == "cpu"
        self.hosts: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def host(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and (t in self.hosts if self.proxy else t.device != self.device)

    def on_device(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and not self.host(t)

    def blocking(self, name: str, args: tuple, kwargs: dict) -> tuple[str | None, bool]:
        """The kind of wait a call makes ("d2h", "h2d", "shape" or None) and whether its output lives on the host
        (module docstring)."""
        first = args[0] if args else None
        if name in D2H:
            return ("d2h" if self.on_device(first) else None), True
        if name in ("to", "cuda"):
            dest = self.device if name == "cuda" else named_device(args, kwargs)
            if dest is None:  # a dtype cast stays where it is
                return None, self.host(first)
            if not self.proxy and dest.type == "cpu":
                return ("d2h" if self.on_device(first) else None), True
            pinned = bool(kwargs.get("non_blocking")) and isinstance(first, torch.Tensor) and first.is_pinned()
            return ("h2d" if self.host(first) and not pinned else None), False
        if name in FROM_HOST and not isinstance(first, torch.Tensor) or name in FACTORIES:
            where = kwargs.get("device")
            on = where is not None and (self.proxy or torch.device(where) == self.device)
            return ("h2d" if on and name in FROM_HOST else None), not on
        if name == "new_tensor":
            return ("h2d" if self.on_device(first) else None), self.host(first)
        inputs = tensors_in(args) + tensors_in(list(kwargs.values()))
        host = bool(inputs) and all(map(self.host, [t for t in inputs if t.dim()] or inputs))  # 0-dim ones go along
        if name == "copy_" and len(args) > 1:
            if self.on_device(first) and self.host(args[1]):
                pinned = bool(kwargs.get("non_blocking") or args[2:3] == (True,)) and args[1].is_pinned()
                return (None if pinned else "h2d"), False
            return ("d2h" if self.host(first) and self.on_device(args[1]) else None), self.host(first)
        if name in SHAPE or (name == "where" and len(args) == 1):
            return ("shape" if self.on_device(first) else None), host
        if name in INDEXING and len(args) > 1 and self.on_device(first):
            index, value = args[1], args[2:3]
            if python_data(index) or python_data(value) or any(self.host(t) and t.dim()
                                                               for t in tensors_in(index) + tensors_in(value)):
                return "h2d", False
            return ("shape" if any(t.dtype == torch.bool for t in tensors_in(index)) else None), False
        return None, host

    def place(self, output: Any, host: bool) -> None:
        """Record where a call's output tensors live (on the CPU a `.to(device)` may return its input itself: it
        is then on the device)."""
        for t in tensors_in(output) if self.proxy else ():
            if host:
                self.hosts[t] = True
            else:
                self.hosts.pop(t, None)


class ForwardClock:
    """Process CPU and wall time inside outermost module calls (forwards), through torch's global module hooks
    (registered on enter, removed on exit). On an accelerator a forward ends when the device has run it."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.depth = device, 0
        self.cpu = self.wall = 0.0
        self.started = (0.0, 0.0)
        self.handles: list[Any] = []

    def before(self, module: torch.nn.Module, inputs: Any) -> None:
        if self.depth == 0:
            self.started = (time.process_time(), time.perf_counter())
        self.depth += 1

    def after(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        self.depth -= 1
        if self.depth == 0:
            synchronize(self.device)
            self.cpu += time.process_time() - self.started[0]
            self.wall += time.perf_counter() - self.started[1]

    def __enter__(self) -> ForwardClock:
        self.handles = [register_module_forward_pre_hook(self.before), register_module_forward_hook(self.after)]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()


@dataclass
class Counts:
    """Torch calls seen by a SyncCounter."""
    outside: Counter = field(default_factory=Counter)  # "kind name" (e.g. "d2h tolist") -> count, outside forwards
    inside: Counter = field(default_factory=Counter)  # ... inside forwards
    calls: Counter = field(default_factory=Counter)  # torch function name -> calls outside forwards


class SyncCounter(TorchFunctionMode):
    """Counts host-blocking points (Residence.blocking) and torch calls, inside and outside the clock's forwards;
    every call runs as it was made."""

    def __init__(self, device: torch.device, clock: ForwardClock) -> None:
        super().__init__()
        self.residence, self.clock, self.counts = Residence(device), clock, Counts()

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = short_name(func)
        kind, host = self.residence.blocking(name, args, kwargs)
        inside = self.clock.depth > 0
        if kind is not None:
            (self.counts.inside if inside else self.counts.outside)[f"{kind} {name}"] += 1
        if not inside and name != "__get__":
            self.counts.calls[name] += 1
        output = func(*args, **kwargs)
        self.residence.place(output, host)
        return output


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
    same_tokens: bool  # the counted generation emitted the timed ones' tokens

    @property
    def blocking(self) -> float:
        return self.d2h + self.h2d + self.shape


def marked_generation(target: LoadedModel, drafters: list[Drafter], prompt: list[int], tokens: int,
                      clock: ForwardClock, method: str, counter: SyncCounter | None = None) -> Window:
    """One generation of len(drafters) rows, the clocks and counters read at the end of every step."""
    marks: list[Mark] = []
    counts = counter.counts if counter else Counts()

    def mark(_: int) -> None:
        marks.append(Mark(time.process_time(), time.perf_counter(), clock.cpu, clock.wall, copy.deepcopy(counts)))

    results = generate_batch(target.model, [prompt] * len(drafters), drafters, Sampling(), tokens, set(),
                             on_step=mark, static=target.static)
    return Window.of([g.token_ids for g in results], marks, method)


def measure_cell(target: LoadedModel, info: MethodInfo, drafter: Drafter, prompt: list[int], batch: int, tokens: int,
                 rounds: int) -> Overhead:
    """A method at one batch size: a warm-up, `rounds` timed generations (the fastest kept), one counted."""
    drafters = [drafter] + [drafter.fork() for _ in range(batch - 1)]
    with ForwardClock(target.model.device) as clock:
        generate_batch(target.model, [prompt] * batch, drafters, Sampling(), min(tokens, 4), set(),
                       static=target.static)  # warm-up
        timed = [marked_generation(target, drafters, prompt, tokens, clock, info.name) for _ in range(rounds)]
        with SyncCounter(target.model.device, clock) as counter:
            counted = marked_generation(target, drafters, prompt, tokens, clock, info.name, counter)
    best = min(timed, key=Window.host_cpu)
    blocking = counted.per_step(lambda c: c.outside)
    calls = counted.per_step(lambda c: c.calls)
    return Overhead(info.name, target.runtime.name if target.runtime else "stock", batch, best.steps,
                    1000 * best.host_cpu(), 1000 * best.host_wall(), 1000 * best.forward_cpu(),
                    *(sum(v for k, v in blocking.items() if k.startswith(f"{kind} ")) for kind in KINDS),
                    sum(counted.per_step(lambda c: c.inside).values()), sum(calls.values()),
                    dict(sorted(calls.items(), key=lambda kv: -kv[1])[:12]), blocking,
                    all(t.tokens == counted.tokens for t in timed))


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


def overhead_header(target: LoadedModel, prompt: int, tokens: int, rounds: int) -> str:
    """The setting, in words: the model, the machine, the prompt's and generation's lengths, what is counted."""
    model = target.model
    return (f"target {target.name} ({model.config.num_hidden_layers} layers, hidden {model.config.hidden_size}), "
            f"{model.device} {str(model.dtype).removeprefix('torch.')}, {torch.get_num_threads()} thread(s), "
            f"{cpu_description()}; T=0, a {prompt}-token prompt, {tokens} new tokens per row, no stop token; host = process CPU time "
            f"outside forwards per step after the prefill, the fastest of {rounds}; blocking points and torch calls "
            "per step outside forwards (d2h/h2d/shape: docs/measuring.md)")


COLUMNS = (("method", 24, "s"), ("runtime", 10, "s"), ("B", 4, "d"), ("steps", 6, "d"), ("host ms", 9, ".2f"),
           ("wall ms", 9, ".2f"), ("fwd ms", 9, ".2f"), ("blocking", 9, ".1f"), ("d2h", 6, ".1f"), ("h2d", 6, ".1f"),
           ("shape", 6, ".1f"), ("in fwd", 7, ".1f"), ("torch calls", 12, ".0f"))


def overhead_values(r: Overhead) -> list[str]:
    values = (r.method, r.runtime, r.batch, r.steps, r.host_ms, r.host_wall_ms, r.forward_ms, r.blocking, r.d2h,
              r.h2d, r.shape, r.blocking_in_forwards, r.torch_calls)
    return [f"{v:{f}}" for v, (_, _, f) in zip(values, COLUMNS)]


def aligned(cells: list[str]) -> str:
    return "".join(c.ljust(w) if f == "s" else c.rjust(w) for c, (_, w, f) in zip(cells, COLUMNS))


def overhead_line(r: Overhead) -> str:
    """A cell's line of the printed table."""
    return aligned(overhead_values(r))


def overhead_table(rows: list[Overhead]) -> str:
    """The table as printed: its head, one line per cell, columns aligned."""
    lines = [aligned([n for n, _, _ in COLUMNS]), *map(overhead_line, rows)]
    if not all(r.same_tokens for r in rows):
        lines.append("WARNING: a counted generation emitted other tokens than its timed ones: "
                     + ", ".join(f"{r.method} B={r.batch} {r.runtime}" for r in rows if not r.same_tokens))
    return "\n".join(lines)


def overhead_markdown(rows: list[Overhead], header: str, command: str) -> str:
    """The report: its command, the setting and the table (markdown)."""
    names = [n for n, _, _ in COLUMNS]
    lines = ["# Host work per decode step (`bench --overhead`)", "", f"Command: `{command}`", "", header, "",
             "| " + " | ".join(names) + " |", "|" + "|".join("---" for _ in names) + "|",
             *("| " + " | ".join(overhead_values(r)) + " |" for r in rows)]
    return "\n".join(lines) + "\n"


def overhead_records(rows: list[Overhead], header: str, command: str) -> dict:
    return {"command": command, "setting": header, "threads": torch.get_num_threads(), "cpu": cpu_description(),
            "cells": [{**asdict(r), "blocking": r.blocking} for r in rows]}
