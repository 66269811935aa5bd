"""CUDA graphs for fixed shapes (specbench.decode.runner): one model's forwards captured per shape and
replayed, the shapes a run met counted (and those first met once timing began: run.json's `cuda_graphs`,
specbench.run.decoder.capture_report), a failed capture reported once (or an error where the run requires it)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from specbench.errors import SpecbenchError


@dataclass
class Captured:
    """One captured forward: the graph, the static inputs it reads and the output it writes."""
    graph: Any  # torch.cuda.CUDAGraph
    inputs: dict[str, Any]
    output: Any


class CaptureError(SpecbenchError):
    """A capture failed where the run requires CUDA graphs (--require-graphs)."""


@dataclass
class StaticStats:
    captures: int = 0
    uncaptured: str = ""  # why these graphs stopped capturing ("" while they capture, or on the CPU)
    shapes: int = 0  # shapes met (captured on CUDA; on the CPU, those that would have been)
    timed: int = 0  # ... of which first met once timing began (a capture inside a timed question on CUDA)
    # At fixed shapes, calls that ran at their own shape, uncaptured, once timing began (a prefill past the largest
    # bucket, a drafter's call over a subset of the batch's rows)
    own_shape_timed: int = 0


@dataclass
class Graphs:
    """One model's forwards captured per shape as CUDA graphs and replayed (the target's, a draft model's, a draft
    head's; each set shares one memory pool). A forward is a function of a dict of tensors (nested dicts allowed)
    that reads its cache from static buffers; the first call of a shape captures it, later calls copy their inputs
    into the captured ones and replay. The output is the graph's own buffer, overwritten by the next replay: a
    caller that keeps it across forwards of the same shape clones it."""
    capture: bool  # CUDA graphs (CUDA only); turned off, for good, by a failed capture
    required: bool = False  # a failed capture raises CaptureError instead (--require-graphs)
    fixed_shapes: bool = False  # calls are padded to bucketed shapes (the runner's policy; captured on CUDA)
    graphs: dict[tuple, Captured] = field(default_factory=dict)
    pool: Any = None
    stats: StaticStats = field(default_factory=StaticStats)
    seen: set[tuple] = field(default_factory=set)  # every shape met, captured or not
    timing: bool = False  # the run's timed questions have begun (shapes met from now on count as `timed`)

    def call(self, key: tuple | None, run: Callable[[dict[str, Any]], Any], inputs: dict[str, Any]) -> Any:
        """run(inputs), from the graph captured for `key` (None: a shape not to capture, run directly)."""
        if key is not None:
            self.note(key)
        elif self.fixed_shapes and self.timing:
            self.stats.own_shape_timed += 1
        if not self.capture or key is None:
            return run(inputs)
        captured = self.graphs.get(key) or self.record(key, run, inputs)
        if captured is None:
            return run(inputs)
        copy_into(captured.inputs, inputs)
        captured.graph.replay()
        return captured.output

    def drop(self) -> None:
        """Forget the captured shapes (their buffers were reallocated) and their pool, released with the last of
        them: the next capture starts a new pool (one into a released pool fails in PyTorch's allocator)."""
        self.graphs, self.pool = {}, None

    def note(self, key: tuple) -> None:
        """Count a shape the first time it is met (during timing too, where that is when it is)."""
        if key not in self.seen:
            self.seen.add(key)
            self.stats.shapes += 1
            self.stats.timed += self.timing

    def record(self, key: tuple, run: Callable[[dict[str, Any]], Any], inputs: dict[str, Any]) -> Captured | None:
        """Capture one shape (after two warm-up runs on a side stream, as CUDA graphs need); None when it fails."""
        static = {name: clone(value) for name, value in inputs.items()}
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):  # writes the step's own slots, which the replay writes again
                    run(static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                output = run(static)
        except RuntimeError as exc:
            self.capture = False
            self.stats.uncaptured = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if self.required:
                raise CaptureError(f"CUDA graph capture failed and --require-graphs was given: "
                                   f"{self.stats.uncaptured}") from exc
            warnings.warn(f"CUDA graph capture failed, this model runs uncaptured: {self.stats.uncaptured}",
                          stacklevel=3)
            return None
        self.pool, self.graphs[key] = graph.pool(), Captured(graph, static, output)
        self.stats.captures += 1
        return self.graphs[key]


def clone(value: Any) -> Any:
    return {k: v.clone() for k, v in value.items()} if isinstance(value, dict) else value.clone()


def copy_into(static: dict[str, Any], inputs: dict[str, Any]) -> None:
    for name, value in inputs.items():
        if isinstance(value, dict):
            copy_into(static[name], value)
        else:
            static[name].copy_(value, non_blocking=True)
