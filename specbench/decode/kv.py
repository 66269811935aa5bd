"""Editing an HF DynamicCache along the sequence axis, on the cache object's own tensors. Every cache the engine
and the drafters make is new_cache(): full-length layers for every attention kind (sliding windows are enforced by
the masks, specbench.decode.layout), so these edits are the same for every layer."""
from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


def new_cache() -> DynamicCache:
    """A cache whose every layer keeps the whole context (DynamicLayer), whatever the model's layer kinds."""
    return DynamicCache()


def _full_attention_layers(cache: DynamicCache) -> list[DynamicLayer]:
    for layer in cache.layers:
        if type(layer) is not DynamicLayer:
            raise NotImplementedError(
                f"KV compaction supports full-attention caches only, not {type(layer).__name__} "
                "(sliding-window or linear-attention layers)"
            )
    return [layer for layer in cache.layers if layer.is_initialized]


def truncate_cache(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` positions."""
    for layer in _full_attention_layers(cache):
        layer.keys, layer.values = layer.keys[..., :length, :], layer.values[..., :length, :]


def compact_cache(cache: DynamicCache, keep_len: int, extra_positions: list[int]) -> None:
    """Keep the first keep_len positions, then extra_positions (absolute indices, ascending) in that order."""
    if extra_positions == list(range(keep_len, keep_len + len(extra_positions))):
        truncate_cache(cache, keep_len + len(extra_positions))
        return
    index = torch.cat([torch.arange(keep_len), torch.tensor(extra_positions, dtype=torch.long)])
    for layer in _full_attention_layers(cache):
        index = index.to(layer.keys.device)
        layer.keys = layer.keys.index_select(-2, index)
        layer.values = layer.values.index_select(-2, index)


def gather_rows(cache: DynamicCache, rows: list[int], slots: list[list[int]]) -> int:
    """Batched compaction: keep batch rows `rows` (in that order); row i keeps the sequence slots slots[i] (in that
    order) packed at the front. Shorter rows are padded with copies of slot 0, which the engine masks out (it knows
    each row's length). Returns the new width (slots per row)."""
    width = max((len(s) for s in slots), default=0)
    index = torch.tensor([s + [0] * (width - len(s)) for s in slots], dtype=torch.long)
    batch = torch.tensor(rows, dtype=torch.long)
    for layer in _full_attention_layers(cache):
        b, slots = batch.to(layer.keys.device), index.to(layer.keys.device)[:, None, :, None]
        # keys and values may differ in width (MLA: qk_head_dim != v_head_dim)
        layer.keys = layer.keys.index_select(0, b).gather(
            2, slots.expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3]))
        layer.values = layer.values.index_select(0, b).gather(
            2, slots.expand(-1, layer.values.shape[1], -1, layer.values.shape[3]))
    return width
