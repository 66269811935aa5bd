"""The one KV cache of every model that decodes (the target, a draft model, a feature head), on every runtime.

Slot s of a cache row holds the row's position s. A forward writes each of its tokens at the slot its call names
(`input_pos` [rows, tokens], passed with the call as gpt-fast's `input_pos` is: transformers hands a forward's
keyword arguments to every cache layer's update) and attends over the first `key_slots` slots (also passed with the
call; the mask hides the slots a query may not see). Draft and tree tokens are written after each row's context and
overwritten next step; the target moves its accepted path down to follow the context (`move_slots`), and when rows
leave a batch live rows fill their places (`copy_rows`), in the target's cache and in every drafter's in the same
call (specbench.decode.runner.keep_rows): row b of every cache is the batch's row b. Every layer's keys and values
live in ONE tensor [layers, rows, heads, capacity, dim] (values: their own head size), so each of these edits is one
gather for all layers, never a loop over layers.

Growth is an allocation policy, not a second cache: `reserve` makes room (copying what is written), rows and slots
rounded up by the caller's policy (exact and doubling when nothing is captured; bucketed and fixed for the run under
CUDA graphs, whose captured forwards read the storage's addresses: `version` tells them it moved). Every attention
kind gets a full-length layer (sliding windows are enforced by the masks, specbench.decode.layout).
"""
from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer


class SlotLayer(DynamicLayer):
    """One decoder layer's view of its SlotCache: writes at the call's `input_pos`, reads its first `key_slots`; the
    call's rows are the cache's first rows, or the cache rows `cache_rows` [rows] names (a drafter's rows: the batch
    rows it drafts, which the engine keeps, specbench.decode.draft.DecodeContext.row)."""

    def __init__(self, cache: "SlotCache", index: int) -> None:
        super().__init__()
        self.cache, self.index = cache, index

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        call = kwargs.get("kwargs", kwargs)
        if "input_pos" not in call:
            raise ValueError("a SlotCache forward needs input_pos and key_slots among its keyword arguments")
        self.is_initialized = True
        keys, values = self.cache.layer(self.index, key_states, value_states)
        span, rows = call["key_slots"], call.get("cache_rows")
        if rows is not None:  # the call's rows are these cache rows (a subset of a batch's, in any order)
            slots = call["input_pos"][:, None, :]
            for storage, states in ((keys, key_states), (values, value_states)):
                heads = torch.arange(states.shape[1], device=rows.device)[None, :, None]
                storage.index_put_((rows[:, None, None], heads, slots), states)
            return keys[:, :, :span].index_select(0, rows), values[:, :, :span].index_select(0, rows)
        rows = key_states.shape[0]
        key_index, value_index = self.cache.write_index(call["input_pos"], key_states, value_states)
        keys[:rows].scatter_(2, key_index, key_states)
        values[:rows].scatter_(2, value_index, value_states)
        return keys[:rows, :, :span], values[:rows, :, :span]

    def get_seq_length(self) -> int:
        return 0  # positions are the call's (position_ids, input_pos); masks are always given

    def get_max_cache_shape(self) -> int:
        return self.cache.capacity


class SlotCache(Cache):
    """The storage of every layer of one model: [layers, rows, heads, capacity, dim] for keys and for values,
    allocated at the first write (when heads and dims are known), at the size `reserve` asked for."""

    def __init__(self, layers: int) -> None:
        super().__init__(layers=[SlotLayer(self, i) for i in range(layers)])
        self.rows, self.capacity = 0, 0
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.version = 0  # bumped whenever the storage moves (captured graphs read its old address)
        self._write: tuple[Any, torch.Tensor, torch.Tensor] | None = None

    def reserve(self, rows: int, capacity: int) -> bool:
        """Room for at least `rows` rows of `capacity` slots (the caller rounds both up); what is written stays.
        Returns whether the storage moved."""
        if rows <= self.rows and capacity <= self.capacity:
            return False
        old, self.rows, self.capacity = (self.keys, self.values), max(rows, self.rows), max(capacity, self.capacity)
        if old[0] is not None:
            self.keys, self.values = (self.grown(t) for t in old)
        self.version += 1
        return True

    def grown(self, old: torch.Tensor) -> torch.Tensor:
        layers, rows, heads, slots, dim = old.shape
        new = old.new_zeros(layers, self.rows, heads, self.capacity, dim)
        new[:, :rows, :, :slots] = old
        return new

    def layer(self, index: int, key_states: torch.Tensor, value_states: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `index`'s keys and values [rows, heads, capacity, dim] (the storage allocated at the first write)."""
        if self.keys is None:
            layers = len(self.layers)
            self.keys = key_states.new_zeros(layers, self.rows, key_states.shape[1], self.capacity, key_states.shape[3])
            self.values = value_states.new_zeros(layers, self.rows, value_states.shape[1], self.capacity,
                                                 value_states.shape[3])
        if self.keys.shape[2::2] != key_states.shape[1::2] or self.values.shape[2::2] != value_states.shape[1::2]:
            raise ValueError("a SlotCache needs every layer's keys (and values) of one shape")
        return self.keys[index], self.values[index]

    def begin_forward(self) -> None:  # the last forward's write indices forgotten (a compiled forward would recompile)
        self._write = None

    def write_index(self, input_pos: torch.Tensor, key_states: torch.Tensor, value_states: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The scatter indices of a forward's writes, made once per forward (every layer's call shares them)."""
        if self._write is None or self._write[0] is not input_pos:
            rows, heads, n = key_states.shape[:3]
            index = input_pos[:rows, None, :, None]
            self._write = (input_pos, index.expand(rows, heads, n, key_states.shape[3]),
                           index.expand(rows, value_states.shape[1], n, value_states.shape[3]))
        return self._write[1], self._write[2]

    def move_slots(self, source: torch.Tensor, target: torch.Tensor) -> None:
        """Per row b < len(source), slot source[b, j] -> slot target[b, j], every layer at once (all read before
        any is written)."""
        if self.keys is None:
            return
        rows = source.shape[0]
        for storage in (self.keys, self.values):
            layers, _, heads, _, dim = storage.shape
            moved = storage[:, :rows].gather(3, source[None, :, None, :, None].expand(layers, rows, heads, -1, dim))
            storage[:, :rows].scatter_(3, target[None, :, None, :, None].expand(layers, rows, heads, -1, dim), moved)

    def copy_rows(self, holes: torch.Tensor, movers: torch.Tensor) -> None:
        """Rows `movers` into rows `holes`, every layer at once."""
        if self.keys is not None and len(holes):
            for storage in (self.keys, self.values):
                storage[:, holes] = storage[:, movers]


def fill_holes(live: list[int]) -> tuple[list[int], list[int], list[int]]:
    """Keep the batch rows `live` (ascending): each dropped row below len(live) is filled with a live row from above,
    so only those rows are copied. Returns (holes, movers, the old row each kept row now holds, in order)."""
    n, staying = len(live), set(live)
    order = list(range(n))
    holes = [b for b in range(n) if b not in staying]
    movers = [b for b in live if b >= n]
    for hole, mover in zip(holes, movers):
        order[hole] = mover
    return holes, movers, order
