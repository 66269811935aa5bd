"""The instruments of `bench --overhead` (specbench.measure.overhead): a clock of the time inside forwards, and a
counter of the points where a GPU run's host waits for the device, with the torch calls made outside forwards.

- `ForwardClock`: process CPU and wall time inside outermost `nn.Module` calls (the target's, a drafter's head or
  draft model), bracketed by torch's global module hooks.
- `CallCounter`: the function calls the interpreter makes outside forwards (Python functions and builtins, torch's
  included, as `sys.setprofile` sees them): a count that no clock, load or cache state moves, unlike host time.
- `SyncCounter`: a `TorchFunctionMode` that runs every call as it was made and classifies it (`Residence.blocking`):
  "d2h" a copy to the host (`.item()`, `.tolist()`, `int()`/`float()`/`bool()` of a tensor, `.cpu()`, `.numpy()`),
  "h2d" a blocking copy to the device (`torch.tensor(data, device=...)`, `.to(device)` or `copy_` of a host tensor,
  indexing with a Python list or a host tensor; `non_blocking` from pinned memory does not count), "shape" an output
  whose size depends on the data (`nonzero`, a boolean-mask index, ...: the host waits to learn the shape). On an
  accelerator each tensor's own device decides; on the CPU proxy `Residence` tracks which tensors a GPU run would
  keep on the host.
"""
from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils.weak import WeakIdKeyDictionary

from specbench.decode.runtime import synchronize

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

    def is_device(self, where: torch.device) -> bool:
        """`where` names the device ("cuda" names "cuda:0" when that is the current one)."""
        index = torch.cuda.current_device() if where.index is None and where.type == "cuda" else where.index
        return where.type == self.device.type and index == self.device.index

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
            on = where is not None and (self.proxy or self.is_device(torch.device(where)))
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
    """Calls seen by a SyncCounter (torch's, and its waits) or a CallCounter (every function call)."""
    outside: Counter = field(default_factory=Counter)  # "kind name" (e.g. "d2h tolist") -> count, outside forwards
    inside: Counter = field(default_factory=Counter)  # ... inside forwards
    calls: Counter = field(default_factory=Counter)  # torch function name -> calls outside forwards
    python: int = 0  # function calls outside forwards (CallCounter)


class CallCounter:
    """Counts every function call outside the clock's forwards, Python's and builtins' (`sys.setprofile`'s "call"
    and "c_call" events), into counts.python; the profiler set before it is restored on exit."""

    def __init__(self, clock: ForwardClock) -> None:
        self.clock, self.counts, self.previous = clock, Counts(), None

    def seen(self, frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call") and self.clock.depth == 0:
            self.counts.python += 1

    def __enter__(self) -> CallCounter:
        self.previous = sys.getprofile()
        sys.setprofile(self.seen)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self.previous)


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
