"""How one model's forwards run on its SlotCache (specbench.decode.kv): the target's, a draft model's, a feature
head's. The same code on every runtime; what differs is one choice, `fixed_shapes`:

- off (`--graphs off`, the CPU's default): a forward runs at its own shape, over the cache slots in use (rounded up
  to SPAN_STEP), and the cache grows (doubling) as a generation needs it;
- on (`--graphs on`, the GPU's default): every forward is padded to a bucketed shape (its tokens per row to
  the next of BLOCK_SIZES, its rows to the next of BATCH_SIZES; pad tokens and pad rows see only themselves) and
  reads the cache's whole capacity, reserved once for the run, so that on CUDA each shape is captured once as a CUDA
  graph and replayed (specbench.decode.graphs; gpt-fast's and the serving engines' way of taking the host out of a
  step). A block longer than the largest bucket (a prefill) runs uncaptured at its own length. On the CPU the same
  padded shapes run uncaptured (the tests run the GPU's shapes there).

A run captures every target shape it can meet before it times anything (run.decoder.prepare_shapes), after its
cache's final `reserve`; a drafter's shapes are captured the first time they occur (in the warm-up, mostly). Every
set of graphs counts the shapes first met once timing began. A capture that fails is reported once and that model
runs uncaptured from then on; the run's tables say UNCAPTURED, and `--require-graphs` makes it an error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

import torch
from transformers import PreTrainedModel

from specbench.decode.graphs import Graphs
from specbench.decode.kv import SlotCache, fill_holes
from specbench.decode.layout import AttentionLayout

BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64)  # tokens per row of a captured forward
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)  # rows of a captured forward
CAPACITY_STEP = 512  # fixed shapes: slots are allocated in multiples of this
SPAN_STEP = 64  # own shapes: a forward reads the slots in use rounded up to this (and the cache grows by doubling)
HEADROOM = 2 * BLOCK_SIZES[-1]  # slots past the longest context a step may write (its block, its padding)
RECOMPILE_LIMIT = 64  # compiled forwards: torch's default, 8, counts hf-compiled's graphs too (transformers' wrapper)


def round_up(n: int, step: int) -> int:
    """n rounded up to a multiple of step."""
    return -(-n // step) * step


def bucket(n: int, sizes: tuple[int, ...]) -> int:
    """The smallest size that holds n, or n itself past the largest (run at its own shape, uncaptured)."""
    return next((s for s in sizes if s >= n), n)


@dataclass(frozen=True)
class Shape:
    """A forward's shape: rows, tokens per row, key slots read; `captured`: a bucketed shape a graph can replay."""
    rows: int
    tokens: int
    key_slots: int
    captured: bool


class BuiltForward(torch.nn.Module):
    """A model's forward from inputs that `build` turns into its keyword arguments on the device (a step's masks
    and positions from its staged buffer), in one module call: the unit a graph captures, and one forward wherever
    forwards are counted (bench --overhead), as a feature head's HeadStep is."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, build: Callable[[dict[str, Any]], dict[str, Any]], inputs: dict[str, Any], **named: Any) -> Any:
        return self.model(**build(inputs), **named)


@dataclass
class ModelRunner:
    """One model's cache and forwards, kept for the run (a later generation reuses the cache)."""
    model: PreTrainedModel
    fixed_shapes: bool  # bucketed shapes over a capacity reserved for the run (captured on CUDA)
    layers: int = 0  # cache layers, when the model's layer indices outrun its config (a layer-skipped view); 0: its own
    beside: "ModelRunner | None" = None  # a drafter's: the target's, whose reserved size its cache takes (fixed shapes)
    compiled: bool = False  # decoding forwards through torch.compile(model) (kernels "inductor"; captured on CUDA too)
    cache: SlotCache | None = None
    graphs: Graphs = field(init=False)
    built: tuple[BuiltForward, BuiltForward] = field(init=False)  # (prefills', decoding forwards'): one unless compiled
    drafting: list[Graphs] = field(default_factory=list)  # the graphs of the drafters beside it (a target's)

    def __post_init__(self) -> None:
        self.graphs = Graphs(self.capture, fixed_shapes=self.fixed_shapes)
        if self.compiled:  # past the limit torch would run a new shape uncompiled, with only a warning
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        plain = BuiltForward(self.model)
        self.built = (plain, BuiltForward(torch.compile(self.model)) if self.compiled else plain)

    @property
    def device(self) -> torch.device:
        """The model's device (its first parameter's)."""
        return next(self.model.parameters()).device

    @cached_property
    def dtype(self) -> torch.dtype:
        """The model's dtype (read once: finding it walks the model's parameters)."""
        return self.model.dtype

    @cached_property
    def layout(self) -> AttentionLayout:
        """The attention layout of the model's config (a target's; read once)."""
        return AttentionLayout.of(self.model.config)

    @property
    def capture(self) -> bool:
        """CUDA graphs were asked for (fixed shapes on CUDA)."""
        return self.fixed_shapes and self.device.type == "cuda"

    def fit(self, rows: int, tokens: int, start: int, gathered: bool = False) -> Shape:
        """The shape of a forward of `rows` rows of up to `tokens` tokens written from slot `start` at most, the
        cache reserved for it. gathered: the rows are cache rows the call names (`cache_rows`, not the cache's first
        rows): never padded with rows, so never captured."""
        padded = bucket(tokens, BLOCK_SIZES) if self.fixed_shapes else tokens
        self.reserve(rows, start + padded)
        shape = self.shape(rows, tokens, start + padded)
        return Shape(rows, shape.tokens, shape.key_slots, False) if gathered and shape.captured else shape

    def shape(self, rows: int, tokens: int, used: int) -> Shape:
        """The shape of a forward of `rows` rows of `tokens` tokens whose writes end before slot `used`."""
        if self.fixed_shapes and tokens <= BLOCK_SIZES[-1] and rows <= BATCH_SIZES[-1]:
            return Shape(bucket(rows, BATCH_SIZES), bucket(tokens, BLOCK_SIZES), self.capacity, True)
        return Shape(rows, tokens, min(round_up(used, SPAN_STEP), self.capacity) if not self.fixed_shapes
                     else self.capacity, False)

    def cache_rows(self, rows: list[int]) -> torch.Tensor | None:
        """The `cache_rows` argument of a drafter's forward over the batch rows `rows` (DecodeContext.row, in the
        order drafted), room made for them: None where they are the cache's first rows in order."""
        self.reserve(max(rows) + 1, 0)
        if rows == list(range(len(rows))):
            return None
        return torch.tensor(rows, device=self.device)

    def copy_rows(self, holes: list[int], movers: list[int]) -> None:
        """Rows `movers` into rows `holes` of the cache (keep_rows), those it holds (a cache of a drafter's own may
        never have held a mover's row)."""
        if self.cache is None or self.cache.keys is None:
            return
        pairs = held_pairs(holes, movers, self.cache.rows)
        if pairs:
            index = torch.tensor(pairs, device=self.cache.keys.device).T
            self.cache.copy_rows(index[0], index[1])

    def reserve(self, rows: int, slots: int) -> SlotCache:
        """Room for at least `rows` rows of `slots` slots each (what is written stays). Fixed shapes: the rows
        bucketed and slots + HEADROOM rounded up to CAPACITY_STEP (a run reserves once, before its warm-up; growing
        later drops the captured graphs); own shapes: the cache doubles."""
        if self.cache is None:
            self.cache = SlotCache(self.layers or self.model.config.num_hidden_layers)
        cache = self.cache
        if self.fixed_shapes:
            if self.beside is not None and self.beside.cache is not None:  # one size for the run, the target's
                rows, slots = max(rows, self.beside.cache.rows), max(slots, self.beside.capacity)
            wanted = (bucket(rows, BATCH_SIZES), round_up(slots + HEADROOM, CAPACITY_STEP))
        else:
            wanted = (rows, slots if slots <= cache.capacity else max(round_up(slots, SPAN_STEP), 2 * cache.capacity))
        if cache.reserve(*wanted):
            self.graphs.drop()
        return cache

    @property
    def capacity(self) -> int:
        return self.cache.capacity if self.cache is not None else 0

    def forward(self, inputs: dict[str, Any], shape: Shape, keep: int | torch.Tensor | None, hidden: bool,
                build: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Any:
        """The model's outputs for one forward of `shape` (inputs padded to it, `input_pos` among them): replayed
        from a captured graph where the shape allows, else run directly. keep: logits_to_keep. build: makes the
        model's keyword arguments from `inputs` on the device, inside the call (captured with it)."""
        assert self.cache is not None, "reserve() first"
        key = (shape.rows, shape.tokens, keep, hidden) if shape.captured else None
        # prefills (past the largest bucket) run uncompiled, as hf-compiled's do: a new length would recompile
        built = self.built[shape.tokens <= BLOCK_SIZES[-1]]
        return self.graphs.call(key, lambda given: self.run(built, given, shape.key_slots, keep, hidden, build), inputs)

    def run(self, built: BuiltForward, inputs: dict[str, Any], key_slots: int, keep: int | torch.Tensor | None,
            hidden: bool, build: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Any:
        """keep None: a model without an lm_head (a decoder), whose last hidden state is the output."""
        extra = {} if keep is None else {"logits_to_keep": keep}
        named = dict(cache=self.cache, use_cache=True, output_hidden_states=hidden, key_slots=key_slots, **extra)
        self.cache.begin_forward()
        if build is not None:
            return built(build, inputs, **named)
        return built.model(**inputs, **named)

    def prepare(self, rows: int, tokens: int, hidden: bool, forward: Callable[[Shape], object]) -> None:
        """A shape met before timing (rows and tokens bucketed, every position's logits kept): on CUDA captured now
        by forward(shape), which runs it at slot 0; elsewhere only counted."""
        shape = self.shape(rows, tokens, tokens)
        if self.graphs.capture:
            forward(shape)
        else:
            self.graphs.note((shape.rows, shape.tokens, shape.tokens, hidden))

    # The run's bookkeeping of its graphs (a target's runner, with its drafters' graphs beside it).

    def require_capture(self) -> None:
        """A failed capture of the target or of a drafter built from now on raises CaptureError (--require-graphs)."""
        self.graphs.required = True

    def start_timing(self) -> None:
        """The warm-up is over: shapes met from now on are counted as met during timing."""
        for graphs in [self.graphs, *self.drafting]:
            graphs.timing = True

    def drafter_runner(self, model: Any, layers: int = 0) -> "ModelRunner":
        """A runner for a drafter's model beside this target: the same shape policy, its graphs reported with the
        target's."""
        runner = ModelRunner(model, self.fixed_shapes, layers, beside=self)
        runner.graphs.required = self.graphs.required
        self.drafting.append(runner.graphs)
        return runner

    def drafting_graphs(self) -> Graphs:
        """Graphs for a drafter's own calls beside this target (Medusa's and Hydra's heads)."""
        graphs = Graphs(self.capture, self.graphs.required, self.fixed_shapes)
        self.drafting.append(graphs)
        return graphs


def call_rows(graphs: Graphs | None, run: Callable[[dict[str, torch.Tensor]], torch.Tensor],
              inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """run(inputs), every input's first dimension and the output's the batch's rows: where the graphs' shapes are
    fixed, the rows padded with zeros to the next of BATCH_SIZES and the call replayed from its captured graph (on
    the CPU: run padded, uncaptured); returns the real rows' output."""
    rows = next(iter(inputs.values())).shape[0]
    if graphs is None or not graphs.fixed_shapes or rows > BATCH_SIZES[-1]:
        return run(inputs)
    size = bucket(rows, BATCH_SIZES)
    padded = {name: torch.cat([x, x.new_zeros(size - rows, *x.shape[1:])]) for name, x in inputs.items()}
    return graphs.call((size,), run, padded)[:rows].clone()


def held_pairs(holes: list[int], movers: list[int], rows: int) -> list[tuple[int, int]]:
    """The (hole, mover) pairs of a keep_rows whose mover a store of `rows` rows holds."""
    return [(hole, mover) for hole, mover in zip(holes, movers) if mover < rows]


def keep_rows(stores: list[Any], stays: list[int]) -> list[int]:
    """Keep the batch rows `stays` (ascending), live rows from the end filling the others' places, in each store of
    rows (the target's runner and the drafters' row stores, Drafter.row_caches: one call each, `copy_rows(holes,
    movers)`), so that row b of every store is still the batch's row b. Returns the old row each kept row now
    holds."""
    holes, movers, order = fill_holes(stays)
    if holes:
        for store in stores:
            store.copy_rows(holes, movers)
    return order
