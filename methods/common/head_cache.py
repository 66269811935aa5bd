"""A feature head's KV cache and forwards (EAGLE-1/2/3): every row of a batch in one SlotCache (specbench.decode.kv)
beside the target, each head forward at the shape the target's runner chooses (its own, or a bucketed one captured
on CUDA as a graph, specbench.decode.graphs), so a drafting step on a GPU is a few replays and one copy of the
finished trees to the host.

- Slot s of a row holds the row's context position s: a fill writes each row's new context positions at their own
  slots, right-padded to the block's length; the mask is causal from the row's positions. Nothing is compacted.
- A search's tree levels go after the row's context: the nodes run before in this search at slots context + 0, 1,
  ..., the level's own nodes after them, so the level mask is [context | ancestors among those nodes | itself],
  built on the device from the row's context length. The next fill overwrites them; nothing is dropped.
- Each forward is the head's run followed by the level's top-k (tree_search.expand): one graph per (rows, tokens,
  input width, k) when captured.
- Rows are held by drafters (an owner key each): a row that stays keeps its slots, moved up when rows before it
  leave; a drafter new to the cache (or one drafted elsewhere since) fills its whole context again.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from specbench.decode.runner import ModelRunner
from specbench.methods.common.tree_search import additive_mask, expand


@dataclass
class HeadCache:
    """One feature head's cache and forwards, shared by the drafters of every row."""
    head: Any  # a feature_tree.FeatureHead
    runner: ModelRunner  # its cache, shapes and graphs (beside the target's runner)
    tree_slots: int  # the most nodes one search runs (they go after a row's context)
    owners: list[int] = field(default_factory=list)  # who holds each cache row, in row order

    @staticmethod
    def of(head: Any, target: ModelRunner | None, tree_slots: int) -> "HeadCache":
        module = head.head
        runner = (target.drafter_runner(module, layers=1) if target is not None
                  else ModelRunner(module, fixed_shapes=False, layers=1))
        return HeadCache(head, runner, tree_slots)

    def arrange(self, owners: list[int]) -> list[bool]:
        """Cache rows in the order of `owners`; returns which rows are new (they hold no context yet)."""
        fresh = self.runner.arrange(self.owners, owners)
        self.owners = list(owners)
        return fresh

    def fill(self, tokens: torch.Tensor, features: torch.Tensor, starts: list[int]) -> torch.Tensor:
        """The head over each row's new context positions (tokens [R, n], their target features [R, n, F]; row b's
        first is position starts[b], the rest follow, right-padded); returns the predicted features [R, n, W]."""
        n = tokens.shape[1]
        start = torch.tensor(starts, device=tokens.device)
        positions = start[:, None] + torch.arange(n, device=tokens.device)
        visible = lambda slots: torch.arange(slots, device=tokens.device)[None, None, :] <= positions[:, :, None]  # noqa: E731
        return self.forward(tokens, features, positions, start, max(starts), visible, 0)[0]

    def forward(self, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor, start: torch.Tensor,
                end: int, visible: Callable[[int], torch.Tensor], k: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One head forward, its block written at slots start[b], start[b] + 1, ... of row b (end: the largest
        start), query j seeing the key slots visible(key slots)[b, j] ([R, n, key slots]); at a bucketed shape pad
        rows and tokens see their own slot. Returns (predicted features, and with k > 0 the top k under each:
        log-probs, draft indices), tensors the caller may keep."""
        rows, n = tokens.shape
        device = tokens.device
        shape = self.runner.fit(rows, n, end + self.tree_slots)
        allowed = visible(shape.key_slots)
        size_rows, size = shape.rows, shape.tokens
        extra_rows, extra = size_rows - rows, size - n
        if extra_rows or extra:
            tokens = torch.nn.functional.pad(tokens, (0, extra, 0, extra_rows))
            features = torch.nn.functional.pad(features, (0, 0, 0, extra, 0, extra_rows))
            positions = torch.nn.functional.pad(positions, (0, extra, 0, extra_rows))
            start = torch.nn.functional.pad(start, (0, extra_rows))
            allowed = torch.nn.functional.pad(allowed, (0, 0, 0, extra, 0, extra_rows))
            pads = torch.ones(size_rows, size, dtype=torch.bool, device=device)
            pads[:rows, :n] = False
            first = start[:, None] + torch.arange(size, device=device)  # a pad token's own slot
            allowed = allowed | (pads[..., None] & (torch.arange(shape.key_slots, device=device) == first[..., None]))
        inputs = {"tokens": tokens, "features": features.to(self.head.dtype), "positions": positions,
                  "input_pos": start[:, None] + torch.arange(size, device=device),
                  "mask": additive_mask(allowed, self.head.dtype)}
        key = (size_rows, size, features.shape[-1], k) if shape.captured else None
        out, logp, index = self.runner.graphs.call(key, lambda given: self.run(given, shape.key_slots, k), inputs)
        if not shape.captured:
            return out, logp, index
        return out[:rows, :n].clone(), logp[:rows, :n].clone(), index[:rows, :n].clone()

    def run(self, inputs: dict[str, torch.Tensor], key_slots: int, k: int
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = self.head.run(inputs["tokens"], inputs["features"], inputs["positions"], inputs["mask"],
                            self.runner.cache, input_pos=inputs["input_pos"], key_slots=key_slots)
        if k == 0:
            return out, out[..., :0], out[..., :0].long()
        return (out, *expand(self.head, out, k))


@dataclass
class HeadRows:
    """tree_search.HeadCache for one search of these rows (their context lengths) on a HeadCache."""
    cache: HeadCache
    filled: list[int]  # each row's context length: its tree nodes go at the slots after it
    base: torch.Tensor  # the same, on the head's device
    ran: int = 0  # nodes this search has run so far, in every row

    def level(self, head: Any, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor,
              ancestors: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rows, n = tokens.shape
        ran = ancestors.shape[2]
        assert ran == self.ran, "a level sees every node run before it in this search"
        device, base = tokens.device, self.base

        def visible(slots: int) -> torch.Tensor:
            relative = torch.arange(slots, device=device)[None] - base[:, None]  # [R, slots]
            allowed = (relative < 0)[:, None, :].expand(rows, n, -1)  # the row's context
            if ran:
                seen = ancestors.gather(2, relative.clamp(0, ran - 1)[:, None, :].expand(rows, n, -1))
                allowed = allowed | (seen & ((relative >= 0) & (relative < ran))[:, None, :])
            return allowed | (relative[:, None, :] == ran + torch.arange(n, device=device)[None, :, None])

        self.ran += n
        return self.cache.forward(tokens, features, positions, base + ran, max(self.filled) + ran, visible, k)

    def drop_levels(self) -> None:
        """Nothing to drop: the next fill overwrites the tree's slots."""
        self.ran = 0
