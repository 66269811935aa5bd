"""`bench --overhead`: the engine's own time per step, everything but the target forward and the drafter (building
the inputs and masks, verification, emission, cache compaction, bookkeeping), at several tree and batch sizes.

A fixed-tree drafter proposes the same bushy tree of random tokens every step, so drafting costs nothing measurable;
the target is wrapped so that the time inside its forward (device-synchronised) is known. Per step:
engine = (wall time - forward time - drafting time) / steps, the fastest of `rounds` generations. On a GPU, where a
7B forward takes about 20 ms, this is what separates a harness from a serving engine."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from specbench.decode.costs import bushy_tree, cpu_description
from specbench.decode.draft import DecodeContext, Draft, Drafter
from specbench.decode.engine import generate_batch
from specbench.decode.runtime import synchronize
from specbench.decode.sampling import Sampling
from specbench.decode.target import LoadedModel

TREE_SIZES = (1, 16, 64)
BATCH_SIZES = (1, 8)


class FixedTreeDrafter(Drafter):
    """The same bushy tree of `size` random tokens at every step (a measuring instrument, not a method)."""

    def __init__(self, size: int, vocab: int, seed: int = 0) -> None:
        tokens = torch.randint(0, vocab, (size,), generator=torch.Generator().manual_seed(seed)).tolist()
        self.draft = bushy_tree(tokens)

    def propose(self, ctx: DecodeContext) -> Draft:
        return self.draft


class TimedTarget:
    """The target as the engine sees it (attributes pass through), adding up the time spent inside its forward."""

    def __init__(self, model: PreTrainedModel) -> None:
        self.model, self.seconds, self.forwards = model, 0.0, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def __call__(self, **inputs: Any) -> Any:
        synchronize(self.model.device)
        t0 = time.perf_counter()
        out = self.model(**inputs)
        synchronize(self.model.device)
        self.seconds += time.perf_counter() - t0
        self.forwards += 1
        return out


@dataclass
class Overhead:
    tree: int
    batch: int
    temperature: float
    steps: int
    forward_ms: float  # per step
    engine_ms: float  # per step: everything but the forward and the drafter


def measure(target: LoadedModel, prompt: list[int], tree: int, batch: int, sampling: Sampling, tokens: int,
            rounds: int) -> Overhead:
    best: Overhead | None = None
    for r in range(rounds):
        timed = TimedTarget(target.model)
        drafters: list[Drafter] = [FixedTreeDrafter(tree, target.model.config.vocab_size) for _ in range(batch)]
        generators = [torch.Generator(device=target.model.device).manual_seed(r * 100 + b) for b in range(batch)]
        started = time.perf_counter()
        results = generate_batch(timed, [prompt] * batch, drafters, sampling, tokens, set(), generators)
        wall = time.perf_counter() - started
        steps = timed.forwards
        drafting = sum(sum(g.draft_times) for g in results)  # a step's drafting, split across its rows, sums back
        found = Overhead(tree, batch, sampling.temperature, steps, 1000 * timed.seconds / steps,
                         1000 * (wall - timed.seconds - drafting) / steps)
        if best is None or found.engine_ms < best.engine_ms:
            best = found
    assert best is not None
    return best


def overhead_benchmark(target: LoadedModel, prompt: list[int], tokens: int = 32, rounds: int = 3,
                       trees: tuple[int, ...] = TREE_SIZES, batches: tuple[int, ...] = BATCH_SIZES,
                       temperatures: tuple[float, ...] = (0.0, 1.0)) -> list[Overhead]:
    rows = []
    for t in temperatures:
        sampling = Sampling(t)
        measure(target, prompt, 1, 1, sampling, 4, 1)  # warm-up
        for batch in batches:
            for tree in trees:
                rows.append(measure(target, prompt, tree, batch, sampling, tokens, rounds))
    return rows


def format_overhead(target: LoadedModel, rows: list[Overhead], tokens: int, rounds: int) -> str:
    model = target.model
    lines = [f"target {target.name}, {model.device} {str(model.dtype).removeprefix('torch.')}, "
             f"{torch.get_num_threads()} threads, {cpu_description()}; {tokens} new tokens per row, fastest of "
             f"{rounds}; a fixed bushy tree of random tokens every step",
             f"{'T':>4}{'batch':>7}{'tree':>6}{'steps':>7}{'forward ms/step':>17}{'engine ms/step':>16}{'share':>8}"]
    for r in rows:
        share = r.engine_ms / (r.engine_ms + r.forward_ms)
        lines.append(f"{r.temperature:>4g}{r.batch:>7}{r.tree:>6}{r.steps:>7}{r.forward_ms:>17.2f}"
                     f"{r.engine_ms:>16.3f}{share:>8.1%}")
    return "\n".join(lines)
