"""Editing an HF DynamicCache along the sequence axis, on the cache object's own tensors."""
from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


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
