"""The KV cache the engine and the drafters use, and its edits along the sequence and batch axes.

`new_cache()` is an HF DynamicCache whose every layer is a `SlotLayer`: keys and values live in preallocated
buffers [B, heads, capacity, dim] written in place at the next free slot, as gpt-fast's static cache is, and the
layer's `keys` / `values` are views of the written slots. A step writes only its new tokens: nothing copies the
context (a plain DynamicLayer concatenates, copying every layer's whole cache at every forward). Rejected draft
slots are dropped by moving the few accepted ones down and shortening the view; the slots past a row's own length
are masked out by the engine. Every attention kind gets a full-length layer (sliding windows are enforced by the
masks, specbench.decode.layout), so these edits are the same for every layer.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

MIN_CAPACITY = 64  # slots a buffer starts with (it doubles when full)


class SlotLayer(DynamicLayer):
    """A full-attention cache layer written in place into buffers with room to spare."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.key_buffer, self.value_buffer = self.allocate(key_states, value_states)
        self.is_initialized = True
        self.set_length(0)

    def allocate(self, key_states: torch.Tensor, value_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This layer's empty key and value buffers: MIN_CAPACITY slots (they double when full)."""
        return (key_states.new_zeros(*key_states.shape[:2], MIN_CAPACITY, key_states.shape[3]),
                value_states.new_zeros(*value_states.shape[:2], MIN_CAPACITY, value_states.shape[3]))

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.length
        end = start + key_states.shape[-2]
        self.reserve(end)
        self.key_buffer[:, :, start:end] = key_states
        self.value_buffer[:, :, start:end] = value_states
        self.set_length(end)
        return self.keys, self.values

    def set_length(self, length: int) -> None:
        """Keep the first `length` slots (the view; the buffers keep their room)."""
        self.length = length
        self.keys = self.key_buffer[:, :, :length]
        self.values = self.value_buffer[:, :, :length]

    def reserve(self, length: int) -> None:
        """Room for `length` slots: the buffers double (copying the written slots once) when they are too short."""
        capacity = self.key_buffer.shape[2]
        if length <= capacity:
            return
        capacity = max(length, 2 * capacity)
        for name in ("key_buffer", "value_buffer"):
            old = getattr(self, name)
            grown = old.new_zeros(*old.shape[:2], capacity, old.shape[3])
            grown[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, name, grown)
        self.set_length(self.length)

    def keep_rows(self, holes: torch.Tensor, movers: torch.Tensor, rows: int) -> None:
        """Copy batch rows `movers` into rows `holes`, then keep the first `rows` rows (a view)."""
        for name in ("key_buffer", "value_buffer"):
            buffer = getattr(self, name)
            if len(holes):
                buffer[holes, :, : self.length] = buffer[movers, :, : self.length]
            setattr(self, name, buffer[:rows])
        self.set_length(self.length)

    def move_slots(self, source: torch.Tensor, target: torch.Tensor) -> None:
        """Per batch row b, slot source[b, j] -> slot target[b, j] (all read before any is written)."""
        for buffer in (self.key_buffer, self.value_buffer):
            heads, dim = buffer.shape[1], buffer.shape[3]
            moved = buffer.gather(2, source[:, None, :, None].expand(-1, heads, -1, dim))
            buffer.scatter_(2, target[:, None, :, None].expand(-1, heads, -1, dim), moved)

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove < 0 and self.is_initialized:
            self.set_length(max(0, self.length + tokens_to_remove))

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        for name in ("key_buffer", "value_buffer"):
            setattr(self, name, getattr(self, name)[indices])
        self.set_length(self.length)


class SlotCache(DynamicCache):
    """A DynamicCache of SlotLayers, one added per decoder layer as the model first writes it."""

    def __init__(self) -> None:
        Cache.__init__(self, layer_class_to_replicate=SlotLayer)

    def copy_rows(self, holes: torch.Tensor, movers: torch.Tensor, rows: int) -> None:
        """Every layer: batch rows `movers` into rows `holes`, then the first `rows` rows kept."""
        for layer in _layers(self):
            layer.keep_rows(holes, movers, rows)

    def move_slots(self, source: torch.Tensor, target: torch.Tensor) -> None:
        """Every layer: per batch row b, slot source[b, j] -> slot target[b, j]."""
        for layer in _layers(self):
            layer.move_slots(source, target)


def new_cache() -> SlotCache:
    """An empty cache written in place, whatever the model's layer kinds (every layer keeps the whole context)."""
    return SlotCache()


def _layers(cache: DynamicCache) -> list[DynamicLayer]:
    for layer in cache.layers:
        if type(layer) is not DynamicLayer and not isinstance(layer, SlotLayer):
            raise NotImplementedError(
                f"KV compaction supports full-attention caches only, not {type(layer).__name__} "
                "(sliding-window or linear-attention layers)"
            )
    return [layer for layer in cache.layers if layer.is_initialized]


def truncate_cache(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` positions."""
    for layer in _layers(cache):
        if isinstance(layer, SlotLayer):
            layer.set_length(length)
        else:
            layer.keys, layer.values = layer.keys[..., :length, :], layer.values[..., :length, :]


def keep_rows(cache: SlotCache, live: list[int]) -> list[int]:
    """Keep the batch rows `live` (ascending) of a new_cache(): each dropped row below len(live) is filled with a
    live row from above, so only those rows are copied. Returns the old row each kept row now holds, in order."""
    n, staying = len(live), set(live)
    order = list(range(n))
    holes = [b for b in range(n) if b not in staying]
    movers = [b for b in live if b >= n]
    for hole, mover in zip(holes, movers):
        order[hole] = mover
    layers = _layers(cache)
    if layers:
        device = layers[0].key_buffer.device
        cache.copy_rows(torch.tensor(holes, device=device), torch.tensor(movers, device=device), n)
    return order


def keep_slots(cache: SlotCache, kept: list[tuple[int, list[int]]]) -> int:
    """Compaction of a new_cache(): row b keeps its first kept[b][0] slots and then the slots kept[b][1] (ascending,
    each at or past kept[b][0]), moved down to follow them. Returns the new width (slots per row); a row's slots
    past its own length hold stale values that the engine masks out."""
    width = max((context + len(extra) for context, extra in kept), default=0)
    moves = [[(s, context + j) for j, s in enumerate(extra) if s != context + j] for context, extra in kept]
    layers = _layers(cache)
    if any(moves):
        # A row with fewer moves repeats its last one (or slot 0 onto itself): the same value written twice.
        longest = max(len(m) for m in moves)
        padded = [m + [m[-1] if m else (0, 0)] * (longest - len(m)) for m in moves]
        device = layers[0].key_buffer.device
        source = torch.tensor([[s for s, _ in m] for m in padded], device=device)
        cache.move_slots(source, torch.tensor([[t for _, t in m] for m in padded], device=device))
    for layer in layers:
        layer.set_length(width)
    return width
