"""The host's work per decode step of ONE source tree, through the public API alone (load_target, load_method,
generate), so that any two commits can be measured the same way (scripts/figures/overhead_side_by_side.py runs
this file once per revision, with that revision's tree first on PYTHONPATH). Prints JSON on stdout.

Per runtime, method and batch size, on --target (the driver's: `shape:smollm2-135m-tiny`, the default target's 30
layers at tiny width, random weights), one thread, T=0, B prompts of equal token length (row i's own tokens), a
fixed token budget:
- host ms: process CPU time outside every outermost module call (torch's global module hooks: the target's
  forwards, or a module wrapping the target as its child, with the input building inside it; a drafter's heads and
  draft models), from the end of the target's first forward (the prefill) to the end of its last, per step (target
  forwards - 1; the target's forwards are counted by the hooks and must equal the rows' longest accept_lengths); the
  fastest of --rounds generations after a warm-up of the same budget (a shorter one left eagle's first timed
  generation at twice the host time of later ones). Freed memory stays in the
  process (glibc's mallopt, as `bench --overhead` sets it, specbench.measure.overhead.keep_freed_memory; set here
  so that a revision without that function is measured alike).
- waits (--waits, one more generation): host-blocking points per step outside forwards, counted by a
  TorchFunctionMode: "d2h" (.item, .tolist, .cpu, int()/float()/bool() of a device tensor), "h2d" (a device
  tensor made from Python data, .to(device)/copy_ of a host tensor unless non_blocking from pinned memory,
  indexing a device tensor with a Python list or a host tensor), "shape" (nonzero and other data-sized outputs, a
  boolean-mask index). On the CPU every tensor is on the CPU: the host tensors are tracked as a GPU run would have
  them (made from Python data or by a factory without a device, brought over by .cpu()/.tolist(), or computed from
  host tensors alone). A simpler count than specbench.measure.host_waits, which older commits lack.
Usage: python overhead_probe.py --target NAME --runtimes fast,compiled --methods vanilla,eagle@total_tokens=16
       --batches 1,4 --max-new-tokens 16 [--prompt-tokens 40] [--rounds 1] [--waits]
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import hashlib
import json
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from importlib import machinery, util
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils.weak import WeakIdKeyDictionary

# setup.py installs these folders of the tree as subpackages of specbench; an editable install's import finder would
# map them to its own checkout, so they are bound to the imported tree's folders before anything imports them
MAPPED = {"methods": "methods", "builtin_tasks": "tasks", "heads": "heads"}
D2H = {"item", "tolist", "cpu", "numpy", "__int__", "__float__", "__bool__", "__index__"}
FROM_DATA = {"tensor", "as_tensor", "asarray"}
FACTORIES = {"zeros", "ones", "empty", "full", "arange", "linspace", "eye", "rand", "randn", "randint", "randperm"}
DATA_SIZED = {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "bincount"}


def bind_tree() -> ModuleType:
    """Import specbench (the first on sys.path) with its tree's methods/, tasks/ and heads/ folders."""
    import specbench

    root = Path(specbench.__file__).resolve().parent.parent
    for name, folder in MAPPED.items():
        spec = util.spec_from_file_location(f"specbench.{name}", root / folder / "__init__.py",
                                            submodule_search_locations=[str(root / folder)])
        assert spec is not None and isinstance(spec.loader, machinery.SourceFileLoader)
        module = util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        setattr(specbench, name, module)
    return specbench


def tensors(values: Any) -> list[torch.Tensor]:
    """The tensors among a call's arguments, one level of lists and tuples deep."""
    items = values if isinstance(values, (list, tuple)) else (values,)
    flat = [t for v in items for t in (v if isinstance(v, (list, tuple)) else (v,))]
    return [t for t in flat if isinstance(t, torch.Tensor)]


@dataclass
class Mark:
    """At the end of one of the target's forwards: the process's CPU and wall seconds so far less those inside
    forwards, the CPU seconds inside them, and the waits counted so far."""
    host_cpu: float
    host_wall: float
    forward_cpu: float
    waits: Counter


@dataclass
class Clock:
    """Process CPU and wall time inside outermost module calls; the clocks and wait counts at the end of each of
    the target's forwards."""
    target: torch.nn.Module
    depth: int = 0
    cpu: float = 0.0
    wall: float = 0.0
    started: tuple[float, float] = (0.0, 0.0)
    waits: Counter = field(default_factory=Counter)  # "kind name" -> count outside forwards
    marks: list[Mark] = field(default_factory=list)

    def before(self, module: torch.nn.Module, inputs: Any) -> None:
        if self.depth == 0:
            self.started = (time.process_time(), time.perf_counter())
        self.depth += 1

    def after(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        self.depth -= 1
        if self.depth == 0:
            cpu, wall = time.process_time(), time.perf_counter()
            self.cpu += cpu - self.started[0]
            self.wall += wall - self.started[1]
            if module is self.target or any(child is self.target for child in module.children()):  # or a wrapper
                self.marks.append(Mark(cpu - self.cpu, wall - self.wall, self.cpu, Counter(self.waits)))


class Waits(TorchFunctionMode):
    """Counts the host-blocking points outside the clock's forwards (module docstring); runs every call as made."""

    def __init__(self, clock: Clock, device: torch.device) -> None:
        super().__init__()
        self.clock, self.proxy = clock, device.type == "cpu"
        self.hosts: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def host(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and (t in self.hosts if self.proxy else t.device.type == "cpu")

    def kind(self, name: str, args: tuple, kwargs: dict) -> tuple[str | None, bool]:
        """The wait a call makes (None: none) and whether its output lives on the host."""
        first = args[0] if args else None
        on_device = isinstance(first, torch.Tensor) and not self.host(first)
        if name in D2H:
            return ("d2h" if on_device else None), True
        if name in FROM_DATA and not isinstance(first, torch.Tensor) or name in FACTORIES:
            there = kwargs.get("device") is not None and (self.proxy or torch.device(kwargs["device"]).type != "cpu")
            return ("h2d" if there and name in FROM_DATA else None), not there
        if name == "to" and any(isinstance(a, (str, torch.device)) for a in (*args[1:], kwargs.get("device"))):
            pinned = bool(kwargs.get("non_blocking")) and isinstance(first, torch.Tensor) and first.is_pinned()
            return ("h2d" if self.host(first) and not pinned else None), False
        if name == "copy_" and len(args) > 1 and on_device and self.host(args[1]):
            return (None if kwargs.get("non_blocking") and args[1].is_pinned() else "h2d"), False
        if name in DATA_SIZED:
            return ("shape" if on_device else None), not on_device
        if name in ("__getitem__", "__setitem__") and len(args) > 1 and on_device:
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            if any(isinstance(i, list) or self.host(i) and i.dim() for i in index):
                return "h2d", False
            return ("shape" if any(t.dtype == torch.bool for t in tensors(index)) else None), False
        inputs = tensors(args) + tensors(list(kwargs.values()))
        return None, bool(inputs) and all(self.host(t) for t in inputs)

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = (resolve_name(func) or getattr(func, "__name__", "")).rpartition(".")[2]
        kind, host = self.kind(name, args, kwargs)
        if kind is not None and self.clock.depth == 0:
            self.clock.waits[f"{kind} {name}"] += 1
        output = func(*args, **kwargs)
        for t in tensors(output) if self.proxy else ():
            if host:
                self.hosts[t] = True
            else:
                self.hosts.pop(t, None)
        return output


@dataclass
class Generation:
    """One measured generation: per step after the prefill, host CPU and wall ms outside forwards, forward ms."""
    steps: int
    host_ms: float
    host_wall_ms: float
    forward_ms: float
    waits: dict[str, float]
    tokens: str  # a digest of every row's tokens and accept lengths
    stop_reasons: list[str]


def measured(api: ModuleType, target: Any, drafter: Any, prompts: list[list[int]], tokens: int,
             count_waits: bool) -> Generation:
    """One generation under the clock (and the wait counter): its figures per step after the prefill."""
    model = target.model
    clock = Clock(model)
    hooks = [register_module_forward_pre_hook(clock.before), register_module_forward_hook(clock.after)]
    try:
        with Waits(clock, model.device) if count_waits else contextlib.nullcontext():
            results = api.generate(target, drafter, prompts, max_new_tokens=tokens, temperature=0.0)
    finally:
        for hook in hooks:
            hook.remove()
    forwards = max(len(r.accept_lengths) for r in results)
    if len(clock.marks) != forwards:
        raise RuntimeError(f"{len(clock.marks)} calls of the target model seen, {forwards} target forwards in "
                           "accept_lengths: the target's forward is not a call of target.model")
    if forwards < 2:
        raise RuntimeError("decoded in one step: measuring needs two or more (raise --max-new-tokens)")
    first, last = clock.marks[0], clock.marks[-1]
    steps = forwards - 1
    digest = hashlib.sha256(json.dumps([[r.token_ids, r.accept_lengths] for r in results]).encode()).hexdigest()
    return Generation(steps, 1000 * (last.host_cpu - first.host_cpu) / steps,
                      1000 * (last.host_wall - first.host_wall) / steps,
                      1000 * (last.forward_cpu - first.forward_cpu) / steps,
                      {k: (last.waits[k] - first.waits[k]) / steps for k in sorted(last.waits)
                       if last.waits[k] > first.waits[k]},
                      digest[:16], sorted({r.stop_reason for r in results}))


def method_options(spec: str) -> tuple[str, dict[str, object]]:
    """`eagle@total_tokens=16,x=y` -> ("eagle", {"total_tokens": 16, "x": "y"})."""
    name, _, options = spec.partition("@")
    parsed: dict[str, object] = {}
    for option in filter(None, options.split(",")):
        key, _, value = option.partition("=")
        parsed[key] = int(value) if value.lstrip("-").isdigit() else value
    return name, parsed


def prompts_of(batch: int, length: int, vocab: int) -> list[list[int]]:
    """`batch` prompts of `length` tokens each, row i's own (a fixed sequence: the same in every run)."""
    generator = torch.Generator().manual_seed(1234)
    return torch.randint(100, vocab, (batch, length), generator=generator).tolist()


def probe(args: argparse.Namespace) -> dict:
    """Every cell of the grid: the figures of the fastest of args.rounds generations, or why a method was skipped."""
    specbench = bind_tree()
    from specbench import api

    cells, skipped = [], []
    for runtime in args.runtimes.split(","):
        target = api.load_target(args.target, runtime=runtime)
        for spec in args.methods.split(","):
            name, options = method_options(spec)
            try:
                drafter = api.load_method(name, target, **options)
            except Exception as exc:  # any reason a method cannot load here is reported, and the others go on
                skipped.append({"runtime": runtime, "method": spec, "reason": f"{type(exc).__name__}: {exc}"})
                print(f"skipped {spec} on {runtime}: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            for batch in map(int, args.batches.split(",")):
                prompts = prompts_of(batch, args.prompt_tokens, target.model.config.vocab_size)
                api.generate(target, drafter, prompts, max_new_tokens=args.max_new_tokens)  # warm-up: the whole budget
                timed = [measured(api, target, drafter, prompts, args.max_new_tokens, False)
                         for _ in range(args.rounds)]
                best = min(timed, key=lambda g: g.host_ms)
                counted = measured(api, target, drafter, prompts, args.max_new_tokens, True) if args.waits else None
                cells.append({"runtime": runtime, "method": spec, "batch": batch, **asdict(best),
                              "waits": counted.waits if counted else None,
                              "same_tokens": all(g.tokens == best.tokens for g in timed + [counted] if g)})
                print(f"{runtime} {spec} B={batch}: {best.host_ms:.2f} host ms/step", file=sys.stderr)
    return {"tree": str(Path(specbench.__file__).resolve().parent.parent),
            "methods_folder": str(Path(specbench.methods.__file__).resolve().parent),
            "target": args.target, "layers": target.model.config.num_hidden_layers, "threads": torch.get_num_threads(),
            "torch": torch.__version__, "prompt_tokens": args.prompt_tokens, "max_new_tokens": args.max_new_tokens,
            "rounds": args.rounds, "cells": cells, "skipped": skipped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--runtimes", required=True, help="comma-separated, e.g. fast,compiled")
    parser.add_argument("--methods", required=True, help="comma-separated, options after @: eagle@total_tokens=16")
    parser.add_argument("--batches", required=True, help="comma-separated batch sizes")
    parser.add_argument("--max-new-tokens", type=int, required=True)
    parser.add_argument("--prompt-tokens", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=1, help="generations timed per cell (the fastest kept)")
    parser.add_argument("--waits", action="store_true", help="count host-blocking points in one more generation")
    args = parser.parse_args()
    torch.set_num_threads(1)
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if libc.mallopt(-4, 0) != 1 or libc.mallopt(-1, 2**31 - 1) != 1:  # M_MMAP_MAX, M_TRIM_THRESHOLD (malloc.h)
        sys.exit("overhead_probe: glibc's mallopt refused (freed memory must stay in the process)")
    print(json.dumps(probe(args)))


if __name__ == "__main__":
    main()
