"""The in-place cache (specbench.decode.kv): writes, growth, row and slot compaction give what concatenation and a
gather would, and a model continued after compaction scores as a fresh prefill does."""
from __future__ import annotations

import torch

from specbench.decode.kv import SlotLayer, keep_rows, keep_slots, new_cache, truncate_cache


def filled_cache(rows: int, lengths: list[int], layers: int = 2, seed: int = 0):
    """A new_cache() written in several updates (past the first capacity), and the same states concatenated."""
    gen = torch.Generator().manual_seed(seed)
    cache, keys, values = new_cache(), [[] for _ in range(layers)], [[] for _ in range(layers)]
    for n in lengths:
        for i in range(layers):
            k = torch.randn(rows, 2, n, 4, generator=gen)
            v = torch.randn(rows, 2, n, 3, generator=gen)  # values may be narrower than keys (MLA)
            cache.update(k, v, i)
            keys[i].append(k)
            values[i].append(v)
    return cache, [torch.cat(k, dim=2) for k in keys], [torch.cat(v, dim=2) for v in values]


def test_writes_in_place_and_growth_equal_concatenation():
    cache, keys, values = filled_cache(3, [50, 1, 30, 1, 1, 60])
    assert all(isinstance(layer, SlotLayer) for layer in cache.layers)
    assert cache.get_seq_length() == 143
    assert cache.layers[0].key_buffer.shape[2] >= 143
    for layer, k, v in zip(cache.layers, keys, values):
        assert torch.equal(layer.keys, k) and torch.equal(layer.values, v)
    truncate_cache(cache, 100)
    assert cache.get_seq_length() == 100 and torch.equal(cache.layers[1].keys, keys[1][:, :, :100])


def test_row_and_slot_compaction_equal_a_gather():
    cache, keys, values = filled_cache(4, [20, 6])
    # Rows 1 and 3 live on; each keeps a prefix (its context) and a few later slots.
    kept = {1: (12, [20, 22, 25]), 3: (5, [5, 6, 21])}
    order = keep_rows(cache, [1, 3])
    assert sorted(order) == [1, 3]
    width = keep_slots(cache, [kept[b] for b in order])
    assert width == 15
    for layer, k, v in zip(cache.layers, keys, values):
        for new, old in enumerate(order):
            context, extra = kept[old]
            slots = list(range(context)) + extra
            assert torch.equal(layer.keys[new, :, : len(slots)], k[old, :, slots])
            assert torch.equal(layer.values[new, :, : len(slots)], v[old, :, slots])


def test_a_lone_row_keeps_a_path_with_gaps():
    cache, keys, _ = filled_cache(1, [10])
    assert keep_slots(cache, [(4, [5, 7, 8])]) == 7
    assert torch.equal(cache.layers[0].keys, keys[0][:, :, [0, 1, 2, 3, 5, 7, 8]])
    assert keep_slots(cache, [(7, [])]) == 7  # nothing to move
