"""A feature head's KV cache and forwards on the static runtime (EAGLE-1/2/3 beside a target on `--runtime
compiled`): every row of a batch in one cache [rows, heads, capacity, dim] of fixed size, and every head forward
padded to a bucketed shape and, on CUDA, captured as a graph (specbench.decode.graphs.Graphs), so a drafting step is
a few replays and one copy of the finished trees to the host.

- Slot s of a row holds the row's context position s, as the chain's do (specbench.decode.chain): a fill writes each
  row's new context positions at their own slots, right-padded to the block's length; the mask is causal from the
  row's positions. Nothing is ever compacted.
- A search's tree levels go after the row's context: the nodes run before in this search at slots context + 0, 1,
  ..., the level's own nodes after them, so the level mask is [context | ancestors among those nodes | itself],
  built on the device from the row's context length. The next fill overwrites them; nothing is dropped.
- Each captured forward is the head's run followed by the level's top-k (tree_search.expand), one graph per
  (rows, tokens, input width, k).
- Rows are held by drafters (an owner key each): a row that stays keeps its slots, moved up when rows before it
  leave; a drafter new to the cache (or one drafted elsewhere since) fills its whole context again.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from specbench.decode.graphs import Graphs
from specbench.decode.static import (
    BATCH_SIZES,
    BLOCK_SIZES,
    StaticSlotCache,
    StaticTarget,
    arrange,
    bucket,
    grown,
    set_start,
)
from specbench.methods.common.tree_search import additive_mask, expand


@dataclass
class StaticHead:
    """One feature head's static cache and captured forwards, shared by the drafters of every row."""
    head: Any  # a feature_tree.FeatureHead
    target: StaticTarget  # the target's: the head's cache is sized like it (one size for the run)
    tree_slots: int  # the most nodes one search runs (they go after a row's context)
    graphs: Graphs
    cache: StaticSlotCache | None = None
    owners: list[int] = field(default_factory=list)  # who holds each cache row, in row order

    @staticmethod
    def of(head: Any, target: StaticTarget, tree_slots: int) -> "StaticHead":
        return StaticHead(head, target, tree_slots, target.drafting_graphs())

    def arrange(self, owners: list[int]) -> list[bool]:
        """Cache rows in the order of `owners`; returns which rows are new (they hold no context yet)."""
        fresh = arrange(self.cache, self.owners, owners)
        self.owners = list(owners)
        return fresh

    def reserve(self, rows: int, slots: int) -> None:
        """Room for `rows` rows of `slots` slots, and at least the target's: allocated anew (what it held copied
        over, the captured graphs dropped) only when the cache it has is smaller."""
        target = self.target.cache.plan if self.target.cache is not None else None
        old = self.cache.plan if self.cache is not None else None
        plan = grown(old, max(rows, target.rows if target else 0),
                     max(slots, (target.capacity if target else 0) + self.tree_slots), 1, self.head.device)
        if plan is None:
            return
        if old is not None and old.keys is not None:
            plan.keys, plan.values = (stored.new_zeros(1, plan.rows, stored.shape[2], plan.capacity, stored.shape[4])
                                      for stored in (old.keys, old.values))
            plan.keys[:, : old.rows, :, : old.capacity] = old.keys
            plan.values[:, : old.rows, :, : old.capacity] = old.values
        self.cache = StaticSlotCache(plan)
        self.graphs.graphs.clear()

    def fill(self, tokens: torch.Tensor, features: torch.Tensor, starts: list[int]) -> torch.Tensor:
        """The head over each row's new context positions (tokens [R, n], their target features [R, n, F]; row b's
        first is position starts[b], the rest follow, right-padded); returns the predicted features [R, n, W]."""
        rows, n = tokens.shape
        device = tokens.device
        start = torch.tensor(starts, device=device)
        positions = start[:, None] + torch.arange(n, device=device)
        self.reserve(rows, max(starts) + n)
        slots = torch.arange(self.cache.plan.capacity, device=device)
        allowed = slots[None, None, :] <= positions[:, :, None]
        return self.forward(tokens, features, positions, start, allowed, 0)[0]

    def forward(self, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor, start: torch.Tensor,
                allowed: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One head forward, its block written at slots start[b], start[b] + 1, ... of row b, query j seeing the
        slots allowed[b, j] ([R, n, capacity]); padded to the bucketed shape (pad rows and tokens see their own
        first slot) and replayed from its captured graph where the shape allows. Returns (predicted features, and
        with k > 0 the top k under each: log-probs, draft indices), copies the caller keeps."""
        rows, n = tokens.shape
        size_rows, size = bucket(rows, BATCH_SIZES), bucket(n, BLOCK_SIZES)
        extra_rows, extra = size_rows - rows, size - n
        if extra_rows or extra:
            tokens = torch.nn.functional.pad(tokens, (0, extra, 0, extra_rows))
            features = torch.nn.functional.pad(features, (0, 0, 0, extra, 0, extra_rows))
            positions = torch.nn.functional.pad(positions, (0, extra, 0, extra_rows))
            start = torch.nn.functional.pad(start, (0, extra_rows))
            allowed = torch.nn.functional.pad(allowed, (0, 0, 0, extra, 0, extra_rows))
            pads = torch.ones(size_rows, size, dtype=torch.bool, device=tokens.device)
            pads[:rows, :n] = False
            first = start[:, None] + torch.arange(size, device=tokens.device)  # a pad token's own slot
            allowed = allowed | (pads[..., None] & (torch.arange(allowed.shape[2], device=tokens.device) == first[..., None]))
        set_start(self.cache.plan, start)
        inputs = {"tokens": tokens, "features": features.to(self.head.dtype), "positions": positions,
                  "mask": additive_mask(allowed, self.head.dtype)}
        captured = size <= BLOCK_SIZES[-1] and size_rows <= BATCH_SIZES[-1]
        key = (size_rows, size, features.shape[-1], k) if captured else None
        out, logp, index = self.graphs.call(key, lambda given: self.run(given, k), inputs)
        return out[:rows, :n].clone(), logp[:rows, :n].clone(), index[:rows, :n].clone()

    def run(self, inputs: dict[str, torch.Tensor], k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = self.head.run(inputs["tokens"], inputs["features"], inputs["positions"], inputs["mask"], self.cache)
        if k == 0:
            return out, out[..., :0], out[..., :0].long()
        return (out, *expand(self.head, out, k))


@dataclass
class StaticRows:
    """tree_search.HeadCache on a StaticHead, for one search of these rows (their context lengths)."""
    static: StaticHead
    filled: list[int]  # each row's context length: its tree nodes go at the slots after it
    base: torch.Tensor  # the same, on the head's device
    ran: int = 0  # nodes this search has run so far, in every row

    def level(self, head: Any, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor,
              ancestors: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rows, n = tokens.shape
        ran = ancestors.shape[2]
        assert ran == self.ran, "a level sees every node run before it in this search"
        device, base = tokens.device, self.base
        self.static.reserve(rows, max(self.filled) + ran + bucket(n, BLOCK_SIZES))
        relative = torch.arange(self.static.cache.plan.capacity, device=device)[None] - base[:, None]  # [R, cap]
        allowed = (relative < 0)[:, None, :].expand(rows, n, -1)  # the row's context
        if ran:
            seen = ancestors.gather(2, relative.clamp(0, ran - 1)[:, None, :].expand(rows, n, -1))
            allowed = allowed | (seen & ((relative >= 0) & (relative < ran))[:, None, :])
        allowed = allowed | (relative[:, None, :] == ran + torch.arange(n, device=device)[None, :, None])
        self.ran += n
        return self.static.forward(tokens, features, positions, base + ran, allowed, k)

    def drop_levels(self) -> None:
        """Nothing to drop: the next fill overwrites the tree's slots."""
        self.ran = 0
