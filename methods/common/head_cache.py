"""A feature head's KV cache and forwards (EAGLE-1/2/3): every row of a batch in one SlotCache (specbench.decode.kv)
beside the target, each head forward at the shape the target's runner chooses (its own, or a bucketed one captured
on CUDA as a graph, specbench.decode.graphs), so a drafting step on a GPU is a few replays and one copy of the
finished trees to the host.

- Slot s of a row holds the row's context position s: a fill writes each row's new context positions at their own
  slots, right-padded to the block's length; the mask is causal from the row's positions. Nothing is compacted.
- A search's tree levels go after the row's context: the nodes run before in this search at slots context + 0, 1,
  ..., the level's own nodes after them, so the level mask is [context | ancestors among those nodes | itself],
  built on the device from the row's context length. The next fill overwrites them; nothing is dropped.
- Each forward is one module call (HeadStep): the mask, built from each row's context length and the block's own
  visibility, the head, the top-k under each node (tree_search.expand) and, for a dynamic tree's level, the level's
  bookkeeping (tree_search.frontier_step); at fixed shapes one graph per (rows, tokens, input width, nodes run
  before, k, the bookkeeping's state: none, or with synthetic acceptance's rates or without), and one per (rows, k)
  for the root's top-k (RootStep).
- Row b of the cache is the batch's row b (DecodeContext.row): the engine moves the head's rows with the target's
  when rows leave (runner.keep_rows, Drafter.row_caches); a search over a subset of the batch's rows names them
  (`cache_rows`, uncaptured); a drafter that begins a sequence fills its whole context again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from specbench.decode.layout import additive
from specbench.decode.runner import ModelRunner
from specbench.methods.common.tree_search import expand


class HeadStep(torch.nn.Module):
    """A drafting step's device work, the unit a graph captures: the mask from each row's context length and the
    block's own visibility, the head over the block, then with k > 0 the top k under each of its nodes
    (tree_search.expand). A module, so that it is one forward wherever forwards are counted (bench --overhead's
    host time is the time outside them)."""

    def __init__(self, head: Any) -> None:
        super().__init__()
        self.adapter = head
        self.module = head.head  # registered: the step's parameters are the head's

    def forward(self, inputs: dict[str, Any], cache: Any, key_slots: int, k: int, then: Callable | None = None,
                real: int = 0) -> tuple:
        """inputs: tokens, features, positions [R, n]; base [R] (a row's context length: slots below it are its
        context, seen by every query); block [R, n, S] (what each query sees of the S slots from base on: the
        nodes run before in this search, then the block's own, written at base + S - n + j); with `then`, state
        (its tensors); cache_rows [R] where the rows are not the cache's first (kv.SlotLayer). Returns the head's
        output, the top k under each token (k > 0) and, with `then`, then(output, log-probs, indices of the first
        `real` tokens, state)."""
        head = self.adapter
        tokens, base, block = inputs["tokens"], inputs["base"], inputs["block"]
        rows, n = tokens.shape
        span = block.shape[2]
        device = tokens.device
        relative = torch.arange(key_slots, device=device)[None] - base[:, None]  # [R, K]
        inside = (relative >= 0) & (relative < span)
        seen = block.gather(2, relative.clamp(0, span - 1)[:, None, :].expand(rows, n, key_slots))
        allowed = (relative < 0)[:, None, :] | (seen & inside[:, None, :])
        input_pos = base[:, None] + (span - n) + torch.arange(n, device=device)
        rows_named = {"cache_rows": inputs["cache_rows"]} if "cache_rows" in inputs else {}
        out = head.run(tokens, inputs["features"], inputs["positions"], additive(allowed, head.dtype), cache,
                       input_pos=input_pos, key_slots=key_slots, **rows_named)
        if k == 0:
            return out, out[..., :0], out[..., :0].long()
        logp, index = expand(head, out, k)
        if then is None:
            return out, logp, index
        return out, logp, index, then(out[:, :real], logp[:, :real], index[:, :real], inputs["state"])


class RootStep(torch.nn.Module):
    """The top k under each row's tree root (its predicted feature): a forward of its own, as HeadStep is."""

    def __init__(self, head: Any) -> None:
        super().__init__()
        self.adapter = head

    def forward(self, inputs: dict[str, torch.Tensor], k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return expand(self.adapter, inputs["features"], k)


@dataclass
class HeadCache:
    """One feature head's cache and forwards, shared by the drafters of every row."""
    head: Any  # a feature_tree.FeatureHead
    runner: ModelRunner  # its cache, shapes and graphs (beside the target's runner); its model: the HeadStep
    tree_slots: int  # the most nodes one search runs (they go after a row's context)
    root_step: RootStep

    @staticmethod
    def of(head: Any, target: ModelRunner | None, tree_slots: int) -> "HeadCache":
        step = HeadStep(head)
        runner = (target.drafter_runner(step, layers=1) if target is not None
                  else ModelRunner(step, fixed_shapes=False, layers=1))
        return HeadCache(head, runner, tree_slots, RootStep(head))

    def expand_root(self, root: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The top k (draft log-probs, draft indices) [R, 1, k] under each row's root feature root [R, W]; rows
        padded to a bucketed count with fixed shapes (captured on CUDA)."""
        rows = root.shape[0]
        shape = self.runner.shape(rows, 1, 1)
        features = root[:, None]
        if shape.rows > rows:
            features = torch.nn.functional.pad(features, (0, 0, 0, 0, 0, shape.rows - rows))
        key = ("root", shape.rows, k) if shape.captured else None
        logp, index = self.runner.graphs.call(key, lambda given: self.root_step(given, k), {"features": features})
        return logp[:rows], index[:rows]

    def fill(self, tokens: torch.Tensor, features: torch.Tensor, start: torch.Tensor, end: int,
             cache_rows: torch.Tensor | None) -> torch.Tensor:
        """The head over each row's new context positions (tokens [R, n], their target features [R, n, F]; row b's
        first is position start[b] (end: the largest), the rest follow, right-padded); returns the predicted
        features [R, n, W]. cache_rows: the rows' cache rows where they are not the first (ModelRunner.cache_rows)."""
        positions = start[:, None] + torch.arange(tokens.shape[1], device=tokens.device)
        return self.forward(tokens, features, positions, start, end, None, 0, cache_rows)[0]

    def forward(self, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor, base: torch.Tensor,
                end: int, ancestors: torch.Tensor | None, k: int, cache_rows: torch.Tensor | None,
                then: Callable | None = None, state: dict[str, torch.Tensor] | None = None) -> tuple:
        """One head forward over n tokens per row after its first base[b] slots (end: the largest): a fill (ancestors
        None: causal, written from base on) or a tree level (each node sees its ancestors among the S nodes run
        before in this search, ancestors [R, n, S], and itself; written after them). At a bucketed shape pad rows and
        tokens see only their own slot (and the context). Returns (predicted features, and with k > 0 the top k under
        each: log-probs, draft indices; with `then`, its result: HeadStep), tensors the caller may keep."""
        rows, n = tokens.shape
        device = tokens.device
        ran = 0 if ancestors is None else ancestors.shape[2]
        shape = self.runner.fit(rows, n, end + self.tree_slots, gathered=cache_rows is not None)
        size_rows, size = shape.rows, shape.tokens
        extra_rows, extra = size_rows - rows, size - n
        if extra_rows or extra:
            pad = torch.nn.functional.pad
            tokens, positions = pad(tokens, (0, extra, 0, extra_rows)), pad(positions, (0, extra, 0, extra_rows))
            features, base = pad(features, (0, 0, 0, extra, 0, extra_rows)), pad(base, (0, extra_rows))
        if ancestors is None:
            block = torch.ones(size, size, dtype=torch.bool, device=device).tril().expand(size_rows, -1, -1)
        else:
            if extra_rows or extra:
                ancestors = pad(ancestors, (0, 0, 0, extra, 0, extra_rows))
            own = torch.eye(size, dtype=torch.bool, device=device).expand(size_rows, -1, -1)
            block = torch.cat([ancestors, own], dim=2)
        inputs = {"tokens": tokens, "features": features.to(self.head.dtype), "positions": positions, "base": base,
                  "block": block, **({} if cache_rows is None else {"cache_rows": cache_rows})}
        if then is not None:
            inputs["state"] = {name: torch.cat([t, t.new_zeros(extra_rows, *t.shape[1:])]) if extra_rows else t
                               for name, t in state.items()}
        key = (size_rows, size, features.shape[-1], ran, k, tuple(state or ())) if shape.captured else None
        found = self.runner.graphs.call(
            key, lambda given: self.runner.model(given, self.runner.cache, shape.key_slots, k, then, n), inputs)
        if not shape.captured:
            return found
        # Views of the graph's outputs: valid until its shape replays, in the next search (no shape repeats within one).
        out, logp, index = (t[:rows, :n] for t in found[:3])
        if then is None:
            return out, logp, index
        return out, logp, index, {name: t[:rows] for name, t in found[3].items()}


@dataclass
class HeadRows:
    """One search's rows (their context lengths) on a HeadCache: what tree_search.Search runs its levels on."""
    cache: HeadCache
    filled: list[int]  # each row's context length: its tree nodes go at the slots after it
    base: torch.Tensor  # the same, on the head's device
    cache_rows: torch.Tensor | None  # the rows' cache rows where they are not the first (ModelRunner.cache_rows)
    ran: int = 0  # nodes this search has run so far, in every row

    def level(self, head: Any, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor,
              ancestors: torch.Tensor, k: int, then: Callable | None = None,
              state: dict[str, torch.Tensor] | None = None) -> tuple:
        """The head over n tree nodes of each row (tokens [R, n], features [R, n, W], positions [R, n]), each seeing
        its row's context, its ancestors among the S nodes run before in this search (ancestors [R, n, S], in the
        order they ran) and itself. Returns the predicted features [R, n, W] and their top k (expand)."""
        assert ancestors.shape[2] == self.ran, "a level sees every node run before it in this search"
        end = max(self.filled) + self.ran
        self.ran += tokens.shape[1]
        return self.cache.forward(tokens, features, positions, self.base, end, ancestors, k, self.cache_rows, then,
                                  state)

    def drop_levels(self) -> None:
        """Nothing to drop: the next fill overwrites the tree's slots."""
        self.ran = 0

    def expand_root(self, root: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k (draft log-probs, draft indices) [R, 1, k] under each row's root feature [R, W]."""
        return self.cache.expand_root(root, k)
