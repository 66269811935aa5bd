"""The KV cache of a feature head for several rows drafted together: one cache [R, heads, width, dim] per layer and
`valid` [R, width] (which of a row's slots hold its context). Positions are explicit, so a row's context slots need
not be contiguous: a batched fill appends every row's new tokens at the common end, padded to the longest, and the
padding slots are simply never valid (holes, squeezed out once they outnumber the context). Tree levels are
appended after the context and dropped after each proposal.

Drafters stay separate objects (one per row); a HeadRows is shared by the rows last drafted together. Rows that
leave the batch take their own rows out with them, and drafters that come together from different HeadRows are
joined into a new one, so a drafter's state is never lost, whichever rows it is drafted with.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from transformers import DynamicCache

from specbench.decode.kv import truncate_cache
from specbench.methods.common.tree_search import additive_mask, expand


class HeadRows:
    def __init__(self, members: list[Any], cache: DynamicCache, valid: torch.Tensor) -> None:
        self.members = members  # the drafter of each row
        self.cache = cache
        self.valid = valid  # [R, width] bool, on the head's device

    @property
    def width(self) -> int:
        return self.valid.shape[1]

    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.keys[:, :, : self.width], layer.values[:, :, : self.width])
                for layer in self.cache.layers if layer.is_initialized]

    def take(self, rows: list[int], new_cache: Callable[[], DynamicCache]) -> "HeadRows":
        """A new HeadRows of these rows (a copy)."""
        index = torch.tensor(rows, dtype=torch.long, device=self.valid.device)
        return HeadRows([self.members[r] for r in rows],
                        seeded(new_cache(), [(k[index], v[index]) for k, v in self.layers()]), self.valid[index])

    def keep(self, rows: list[int], new_cache: Callable[[], DynamicCache]) -> None:
        """Keep only these rows."""
        kept = self.take(rows, new_cache)
        self.members, self.cache, self.valid = kept.members, kept.cache, kept.valid

    def level(self, head: Any, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor,
              ancestors: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """tree_search.HeadCache.level: the nodes' keys go after every slot so far (context, earlier levels)."""
        rows, n = tokens.shape
        own = torch.eye(n, dtype=torch.bool, device=tokens.device).expand(rows, n, n)
        allowed = torch.cat([self.valid[:, None, :].expand(rows, n, -1), ancestors, own], dim=2)
        out = head.run(tokens, features, positions, additive_mask(allowed, head.dtype), self.cache)
        return (out, *expand(head, out, k))

    def append(self, valid: torch.Tensor) -> None:
        """The last forward appended valid.shape[1] slots; valid says which hold context."""
        self.valid = torch.cat([self.valid, valid], dim=1)

    def drop_levels(self) -> None:
        """Forget the tree levels appended after the context."""
        truncate_cache(self.cache, self.width)

    def squeeze(self, filled: list[int], new_cache: Callable[[], DynamicCache]) -> None:
        """Move each row's context slots to its front once holes take more than half the width (a gather per
        layer; `filled` are the rows' context lengths, known on the host, so nothing is read back)."""
        longest = max(filled, default=0)
        if self.width <= 2 * longest + 64:
            return
        order = torch.sort((~self.valid).to(torch.int8), dim=1, stable=True).indices[:, :longest]
        index = order[:, None, :, None]
        moved = [(k.gather(2, index.expand(-1, k.shape[1], -1, k.shape[3])),
                  v.gather(2, index.expand(-1, v.shape[1], -1, v.shape[3]))) for k, v in self.layers()]
        self.cache = seeded(new_cache(), moved)
        self.valid = torch.arange(longest, device=self.valid.device)[None] < torch.tensor(
            filled, device=self.valid.device)[:, None]


def seeded(cache: DynamicCache, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> DynamicCache:
    """An empty cache holding these keys and values (layer i: layers[i])."""
    for i, (keys, values) in enumerate(layers):
        cache.update(keys, values, i)
    return cache


def join(drafters: list[Any], new_cache: Callable[[], DynamicCache], device: torch.device) -> HeadRows:
    """The HeadRows whose rows are these drafters' (their `rows` attribute: a HeadRows or None), in this order.
    The common case, the same rows as last time or some of them in any order, keeps the shared one (a row that
    is not asked again takes a copy of its row with it); otherwise each drafter's row is taken out of what it shares and the
    rows are stacked, padded to the widest with invalid slots."""
    shared = drafters[0].rows
    if shared is not None and all(d.rows is shared for d in drafters):
        where = {id(m): r for r, m in enumerate(shared.members)}
        rows = [where.get(id(d)) for d in drafters]
        if None not in rows:
            if rows != list(range(len(shared.members))):  # rows left or moved (the engine fills holes from the end)
                for r in sorted(set(range(len(shared.members))) - set(rows)):
                    if shared.members[r] is not None:
                        shared.members[r].rows = shared.take([r], new_cache)
                shared.keep(rows, new_cache)  # one gather, in the order asked
            return shared
    pieces = [own_row(d, new_cache, device) for d in drafters]
    width = max(p.width for p in pieces)
    like = next((p.layers() for p in pieces if p.layers()), [])
    layers = [tuple(torch.cat([padded(p.layers()[i][j] if p.layers() else None, pair[j], width) for p in pieces])
                    for j in (0, 1)) for i, pair in enumerate(like)]
    valid = torch.cat([torch.nn.functional.pad(p.valid, (0, width - p.width)) for p in pieces])
    joined = HeadRows(list(drafters), seeded(new_cache(), layers), valid)
    for d in drafters:
        d.rows = joined
    return joined


def padded(tensor: torch.Tensor | None, like: torch.Tensor, width: int) -> torch.Tensor:
    """[1, heads, w, dim] -> [1, heads, width, dim] with zero slots after (None, an empty row: all zeros)."""
    if tensor is None:
        return like.new_zeros(1, like.shape[1], width, like.shape[3])
    return torch.nn.functional.pad(tensor, (0, 0, 0, width - tensor.shape[2]))


def own_row(drafter: Any, new_cache: Callable[[], DynamicCache], device: torch.device) -> HeadRows:
    """A one-row HeadRows of the drafter's state, taken out of the HeadRows it shares (which keeps the others)."""
    shared = drafter.rows
    where = [r for r, m in enumerate(shared.members) if m is drafter] if shared is not None else []
    if not where:
        return HeadRows([drafter], new_cache(), torch.zeros(1, 0, dtype=torch.bool, device=device))
    mine = shared.take(where, new_cache)
    shared.keep([r for r in range(len(shared.members)) if r != where[0]], new_cache)
    return mine
