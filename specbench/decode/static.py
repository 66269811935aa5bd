"""The static runtime (`--runtime compiled`): the target's KV cache allocated once at a fixed capacity and written at
explicit slots, every forward padded to one of a few shapes, and on CUDA each shape captured once as a CUDA graph
and replayed (gpt-fast's and the serving engines' way of taking the host out of a decoding step).

- The cache: every layer's keys and values in buffers [rows, heads, capacity, dim] allocated on the first write and
  kept for the run (a later generation reuses them; they grow, dropping the captured graphs, only when a generation
  needs more rows or slots than they have). A forward writes its block at slots [start, start + n), `start` a device
  tensor the engine sets before the forward, so a replayed graph writes where the step asks (one start per row: the
  engine's rows all start at its width; a draft model's chain, specbench.decode.chain, starts each row at its own
  length). Attention reads all `capacity` slots; the mask hides the ones past a row's context. Accepted-path
  compaction and row eviction are the same device-side gathers as the dynamic cache's (specbench.decode.kv).
- The shapes: a step's block of tokens per row is padded to the next of BLOCK_SIZES and the batch to the next of
  BATCH_SIZES (pad tokens and pad rows see only themselves); a block longer than the largest (a prefill) runs
  uncaptured at its own length.
- Capture (CUDA only): per (rows, tokens, hidden states asked) one graph, replayed after copying the step's inputs
  into its static inputs. A run captures every target shape it can meet before it times anything
  (engine.prepare_shapes; the graphs themselves: specbench.decode.graphs), after its cache's final `reserve`; a drafter's shapes are captured the first time they
  occur (in the warm-up, mostly). Every set of graphs counts the shapes first met once timing began (`timed`:
  captures inside timed questions on CUDA, the captures there would have been on the CPU). A capture that fails (a
  model whose forward synchronises with the host, e.g. a mixture of experts routing on the host) is reported once
  and that runtime runs uncaptured from then on; the run's tables say UNCAPTURED, and `--require-graphs` makes it
  an error. On the CPU the same code runs uncaptured (the tests run it there).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import Cache

from specbench.decode.graphs import CaptureReport, Graphs
from specbench.decode.kv import SlotCache, SlotLayer

BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64)  # tokens per row of a captured forward
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)  # rows of a captured forward
CAPACITY_STEP = 512  # slots are allocated in multiples of this
HEADROOM = 2 * BLOCK_SIZES[-1]  # slots past the longest context a step may write (its block, its padding)


def round_up(n: int, step: int) -> int:
    """n rounded up to a multiple of step."""
    return -(-n // step) * step


def bucket(n: int, sizes: tuple[int, ...]) -> int:
    """The smallest size that holds n, or n itself past the largest (run at its own shape, uncaptured)."""
    return next((s for s in sizes if s >= n), n)


@dataclass
class SlotPlan:
    """What every static layer shares: its size, where the current forward writes, and the storage of all layers'
    keys and values (one tensor each, [layers, rows, heads, capacity, dim], so that a compaction moves every
    layer's slots in one gather rather than one per layer)."""
    rows: int
    capacity: int
    layers: int
    start: torch.Tensor  # [rows] long on the device: the first slot the current forward writes in each row
    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None

    def views(self, index: int, key_states: torch.Tensor, value_states: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `index`'s buffers [rows, heads, capacity, dim] (the storage is allocated at the first layer's)."""
        if self.keys is None:
            self.keys = key_states.new_zeros(self.layers, self.rows, key_states.shape[1], self.capacity,
                                             key_states.shape[3])
            self.values = value_states.new_zeros(self.layers, self.rows, value_states.shape[1], self.capacity,
                                                 value_states.shape[3])
        if self.keys.shape[2::2] != key_states.shape[1::2] or self.values.shape[2::2] != value_states.shape[1::2]:
            raise ValueError("the static runtime needs every layer's keys and values of one shape")
        return self.keys[index], self.values[index]


def grown(plan: SlotPlan | None, rows: int, slots: int, layers: int, device: torch.device) -> SlotPlan | None:
    """A plan (no storage yet) for at least `rows` rows (bucketed) of `slots` slots (rounded up to CAPACITY_STEP),
    never smaller than `plan`; None when `plan` already holds them."""
    rows = bucket(rows, BATCH_SIZES)
    if plan is not None and rows <= plan.rows and slots <= plan.capacity:
        return None
    rows = max(rows, plan.rows if plan else 0)
    capacity = max(round_up(slots, CAPACITY_STEP), plan.capacity if plan else 0)
    return SlotPlan(rows, capacity, layers, torch.zeros(rows, dtype=torch.long, device=device))


class StaticSlotLayer(SlotLayer):
    """A cache layer whose buffers have a fixed size, written at the slots its plan names and read whole."""

    def __init__(self, plan: SlotPlan, index: int) -> None:
        super().__init__()
        self.plan, self.index = plan, index

    def allocate(self, key_states: torch.Tensor, value_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of this layer's part of the plan's storage."""
        return self.plan.views(self.index, key_states, value_states)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        rows, heads, n, dim = key_states.shape
        slots = (self.plan.start[:rows, None] + torch.arange(n, device=self.device))[:, None, :, None]
        self.key_buffer[:rows].scatter_(2, slots.expand(rows, heads, n, dim), key_states)
        self.value_buffer[:rows].scatter_(2, slots.expand(rows, heads, n, value_states.shape[3]), value_states)
        return self.key_buffer[:rows], self.value_buffer[:rows]


class StaticSlotCache(SlotCache):
    """One StaticSlotLayer per decoder layer, all sharing one plan and its storage."""

    def __init__(self, plan: SlotPlan) -> None:
        Cache.__init__(self, layers=[StaticSlotLayer(plan, i) for i in range(plan.layers)])
        self.plan = plan

    def reset(self) -> None:
        """A new generation: nothing written (the buffers stay; stale slots are masked until overwritten)."""
        for layer in self.layers:
            if layer.is_initialized:
                layer.set_length(0)

    def copy_rows(self, holes: torch.Tensor, movers: torch.Tensor, rows: int) -> None:
        """Batch rows `movers` into rows `holes` in every layer at once; every row stays (graphs read them)."""
        if len(holes) and self.plan.keys is not None:
            for storage in (self.plan.keys, self.plan.values):
                storage[:, holes] = storage[:, movers]

    def move_slots(self, source: torch.Tensor, target: torch.Tensor) -> None:
        """Per batch row b, slot source[b, j] -> slot target[b, j], in every layer at once."""
        if self.plan.keys is None:
            return
        for storage in (self.plan.keys, self.plan.values):
            layers, _, heads, _, dim = storage.shape
            rows = source.shape[0]
            index = source[None, :, None, :, None].expand(layers, rows, heads, -1, dim)
            moved = storage[:, :rows].gather(3, index)
            storage[:, :rows].scatter_(3, target[None, :, None, :, None].expand(layers, rows, heads, -1, dim), moved)


@dataclass
class StaticTarget:
    """The target's forward on a static cache, captured per shape on CUDA. One per loaded target, kept for the run."""
    model: PreTrainedModel
    capture: bool  # asked for CUDA graphs (CUDA only); `graphs.capture` says whether they still capture
    cache: StaticSlotCache | None = None
    graphs: Graphs = field(init=False)
    layers: int = 0  # cache layers, when the model's layer indices outrun its config (a layer-skipped view); 0: its own
    drafting: list[Graphs] = field(default_factory=list)  # the graphs of the draft models and heads beside it

    def __post_init__(self) -> None:
        self.graphs = Graphs(self.capture)

    def require_capture(self) -> None:
        """A failed capture of the target or of a drafter built from now on raises CaptureError (--require-graphs)."""
        self.graphs.required = True

    def start_timing(self) -> None:
        """The warm-up is over: shapes met from now on are counted as met during timing."""
        for graphs in [self.graphs, *self.drafting]:
            graphs.timing = True

    def reserve(self, rows: int, slots: int) -> StaticSlotCache:
        """A cache for at least `rows` sequences of `slots` slots each (a run sizes it once, before its warm-up),
        allocated anew when the one it has is smaller, which drops the captured graphs."""
        layers = self.layers or self.model.config.num_hidden_layers
        plan = grown(self.cache.plan if self.cache is not None else None, rows, slots + HEADROOM, layers,
                     self.model.device)
        if plan is not None:
            self.cache = StaticSlotCache(plan)
            self.graphs.graphs.clear()
        return self.cache

    def new_cache(self, rows: int, slots: int) -> StaticSlotCache:
        """The run's cache, emptied for a generation of `rows` sequences up to `slots` slots each."""
        cache = self.reserve(rows, slots)
        cache.reset()
        return cache

    @property
    def capacity(self) -> int:
        return self.cache.plan.capacity if self.cache is not None else 0

    def drafting_graphs(self) -> Graphs:
        """Graphs for a drafter beside this target: captured where the target's are, reported with them."""
        graphs = Graphs(self.capture, self.graphs.required)
        self.drafting.append(graphs)
        return graphs

    def capture_report(self) -> CaptureReport:
        """What was captured, the target's and its drafters' graphs apart, when, and why not."""
        drafting = self.drafting
        return CaptureReport(
            asked=self.capture,
            target_shapes=self.graphs.stats.shapes, drafting_shapes=sum(g.stats.shapes for g in drafting),
            target_captures=self.graphs.stats.captures, drafting_captures=sum(g.stats.captures for g in drafting),
            target_timed=self.graphs.stats.timed, drafting_timed=sum(g.stats.timed for g in drafting),
            uncaptured=next((g.stats.uncaptured for g in [self.graphs, *drafting] if g.stats.uncaptured), ""))


    def forward(self, inputs: dict[str, Any], start: int | torch.Tensor, keep: int | torch.Tensor, hidden: bool
                ) -> Any:
        """The model's outputs for one forward whose block is written from slot `start` (every row's, or one per row):
        replayed from a captured graph where the shape allows, else run directly. keep: logits_to_keep (an index
        tensor only for a block too long to capture)."""
        assert self.cache is not None, "new_cache() first"
        set_start(self.cache.plan, start)
        rows, tokens = inputs["input_ids"].shape
        key = (rows, tokens, keep, hidden) if tokens <= BLOCK_SIZES[-1] and rows <= BATCH_SIZES[-1] else None
        return self.graphs.call(key, lambda given: self.run(given, keep, hidden), inputs)

    def prepare(self, rows: int, tokens: int, hidden: bool, inputs: Callable[[], dict[str, Any]]) -> None:
        """A shape met before timing (rows and tokens bucketed, every position's logits kept): on CUDA captured now,
        its forward run on inputs() at slot 0 of a cache that the next generation resets; elsewhere only counted."""
        if self.graphs.capture:
            self.forward(inputs(), 0, tokens, hidden)
        else:
            self.graphs.note((rows, tokens, tokens, hidden))

    def run(self, inputs: dict[str, Any], keep: int | torch.Tensor, hidden: bool) -> Any:
        return self.model(**inputs, cache=self.cache, use_cache=True, logits_to_keep=keep,
                          output_hidden_states=hidden)


def call_rows(graphs: Graphs | None, run: Callable[[dict[str, torch.Tensor]], torch.Tensor],
              inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """run(inputs), every input's first dimension and the output's the batch's rows: with graphs (a drafter on the
    static runtime), the rows padded with zeros to the next of BATCH_SIZES and the call replayed from its captured
    graph (on the CPU: run padded, uncaptured); returns the real rows' output, a copy."""
    if graphs is None:
        return run(inputs)
    rows = next(iter(inputs.values())).shape[0]
    size = bucket(rows, BATCH_SIZES)
    padded = {name: torch.cat([x, x.new_zeros(size - rows, *x.shape[1:])]) for name, x in inputs.items()}
    return graphs.call((size,) if size <= BATCH_SIZES[-1] else None, run, padded)[:rows].clone()


def arrange(cache: StaticSlotCache | None, before: list[int], owners: list[int]) -> list[bool]:
    """Cache rows in the order of `owners` (keys of whoever holds each row; `before`: the order they were in): one
    still here keeps its slots (moved to its new row, every moved row read before any is written); returns which
    rows are new (they hold nothing yet)."""
    where = {owner: row for row, owner in enumerate(before)}
    moves = [(where[owner], row) for row, owner in enumerate(owners) if where.get(owner, row) != row]
    if moves and cache is not None:
        device = cache.plan.start.device
        cache.copy_rows(torch.tensor([row for _, row in moves], device=device),
                        torch.tensor([old for old, _ in moves], device=device), len(owners))
    return [owner not in where for owner in owners]


def set_start(plan: SlotPlan, start: int | torch.Tensor) -> None:
    """Where the next forward writes: one slot for every row, or one per row (a [rows] tensor)."""
    if isinstance(start, int):
        plan.start.fill_(start)
    else:
        plan.start[: len(start)].copy_(start, non_blocking=True)
