"""The one slot cache (specbench.decode.kv.SlotCache): a forward's writes land at the slots its call names
(`input_pos`) and it reads back its first `key_slots` slots; slot moves and row copies move every layer at once;
`reserve` grows the storage keeping what is written; a call over cache rows it names (`cache_rows`) writes and reads
those rows only; the engine's row bookkeeping (fill_holes, runner.keep_rows) moves what it says."""
from __future__ import annotations

import pytest
import torch

from specbench.decode.kv import SlotCache, SlotLayer, fill_holes
from specbench.decode.runner import ModelRunner, keep_rows

LAYERS, HEADS, KEY_DIM, VALUE_DIM = 3, 2, 4, 3  # values narrower than keys (MLA)


def states(rows: int, tokens: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.randn(rows, HEADS, tokens, KEY_DIM, generator=gen),
            torch.randn(rows, HEADS, tokens, VALUE_DIM, generator=gen))


def written(rows: int, slots: int, seed: int = 0) -> SlotCache:
    """A cache of `rows` rows whose first `slots` slots of every layer hold random states (one forward)."""
    gen = torch.Generator().manual_seed(seed)
    cache = SlotCache(LAYERS)
    cache.reserve(rows, slots)
    where = torch.arange(slots).expand(rows, -1)
    for i in range(LAYERS):
        cache.update(*states(rows, slots, gen), i, input_pos=where, key_slots=slots)
    return cache


def test_writes_land_at_their_input_pos_and_a_forward_reads_its_key_slots():
    gen = torch.Generator().manual_seed(1)
    cache = SlotCache(LAYERS)
    cache.reserve(2, 16)
    assert all(isinstance(layer, SlotLayer) for layer in cache.layers)
    where = torch.tensor([[3, 4, 5], [9, 10, 11]])  # each row its own slots
    for i in range(LAYERS):
        k, v = states(2, 3, gen)
        keys, values = cache.update(k, v, i, input_pos=where, key_slots=12)
        assert keys.shape == (2, HEADS, 12, KEY_DIM) and values.shape == (2, HEADS, 12, VALUE_DIM)
        for b in range(2):
            assert torch.equal(cache.keys[i, b, :, where[b]], k[b]) and torch.equal(cache.values[i, b, :, where[b]], v[b])
            assert torch.equal(keys[b, :, where[b]], k[b])  # what the forward attends over holds them
        untouched = torch.ones(16, dtype=torch.bool)
        untouched[where[0]] = False
        assert not cache.keys[i, 0, :, untouched].any()  # nothing else was written
    with pytest.raises(ValueError, match="input_pos"):
        cache.update(*states(2, 1, gen), 0)


def test_move_slots_moves_every_layer_reading_all_before_writing():
    cache = written(2, 10)
    keys, values = cache.keys.clone(), cache.values.clone()
    # Row 0 moves slots 5, 7, 8 down to 4, 5, 6 (slot 5 is read before it is written); row 1 swaps 2 and 3.
    source, target = torch.tensor([[5, 7, 8], [2, 3, 3]]), torch.tensor([[4, 5, 6], [3, 2, 2]])
    cache.move_slots(source, target)
    for b in range(2):
        expected_keys, expected_values = keys[:, b].clone(), values[:, b].clone()
        expected_keys[:, :, target[b]] = keys[:, b, :, source[b]]
        expected_values[:, :, target[b]] = values[:, b, :, source[b]]
        assert torch.equal(cache.keys[:, b], expected_keys) and torch.equal(cache.values[:, b], expected_values)


def test_copy_rows_moves_every_layer():
    cache = written(4, 6)
    keys, values = cache.keys.clone(), cache.values.clone()
    cache.copy_rows(torch.tensor([0, 2]), torch.tensor([3, 1]))
    assert torch.equal(cache.keys[:, [0, 1, 2, 3]], keys[:, [3, 1, 1, 3]])
    assert torch.equal(cache.values[:, [0, 1, 2, 3]], values[:, [3, 1, 1, 3]])


def test_reserve_grows_keeping_what_is_written_and_moves_nothing_when_there_is_room():
    cache = written(2, 8)
    keys, values, version = cache.keys.clone(), cache.values.clone(), cache.version
    assert not cache.reserve(1, 8) and cache.version == version  # room enough: nothing moves
    assert cache.reserve(3, 20) and cache.version == version + 1
    assert cache.keys.shape == (LAYERS, 3, HEADS, 20, KEY_DIM) and cache.values.shape[3] == 20
    assert torch.equal(cache.keys[:, :2, :, :8], keys) and torch.equal(cache.values[:, :2, :, :8], values)
    assert not cache.keys[:, 2].any() and not cache.keys[:, :, :, 8:].any()
    assert cache.reserve(1, 30) and cache.rows == 3 and cache.capacity == 30  # more slots keep the rows it had


def test_fill_holes_fills_dropped_rows_with_live_rows_from_above():
    assert fill_holes([0, 2, 4, 5]) == ([1, 3], [4, 5], [0, 4, 2, 5])
    assert fill_holes([0, 1]) == ([], [], [0, 1])
    assert fill_holes([3]) == ([0], [3], [3])


def test_a_call_over_named_cache_rows_writes_and_reads_those_rows_only():
    cache = written(3, 6)
    keys, values = cache.keys.clone(), cache.values.clone()
    gen = torch.Generator().manual_seed(2)
    rows, where = torch.tensor([2, 0]), torch.tensor([[4, 5], [1, 2]])  # batch rows 2 and 0, in that order
    for i in range(LAYERS):
        k, v = states(2, 2, gen)
        read_keys, read_values = cache.update(k, v, i, input_pos=where, key_slots=5, cache_rows=rows)
        assert read_keys.shape == (2, HEADS, 5, KEY_DIM) and read_values.shape == (2, HEADS, 5, VALUE_DIM)
        for b, row in enumerate(rows.tolist()):
            assert torch.equal(cache.keys[i, row, :, where[b]], k[b])
            assert torch.equal(cache.values[i, row, :, where[b]], v[b])
            keys[i, row, :, where[b]], values[i, row, :, where[b]] = k[b], v[b]
            assert torch.equal(read_keys[b], keys[i, row, :, :5]) and torch.equal(read_values[b], values[i, row, :, :5])
    assert torch.equal(cache.keys, keys) and torch.equal(cache.values, values)  # row 1 and every other slot untouched


def test_keep_rows_moves_the_rows_of_every_cache_that_holds_them():
    """The engine's compaction (runner.keep_rows): batch row 3 fills row 0's place in the target's cache and in a
    drafter's; a drafter cache of its own that never held row 3 is left as it is."""
    target, shared, own = (ModelRunner(torch.nn.Linear(1, 1), fixed_shapes=False) for _ in range(3))
    target.cache, shared.cache, own.cache = written(4, 3), written(4, 3, seed=1), written(2, 3, seed=2)
    before = [r.cache.keys.clone() for r in (target, shared, own)]
    assert keep_rows([target, shared, own], [1, 3]) == [3, 1]
    for runner, keys in zip((target, shared), before):
        assert torch.equal(runner.cache.keys[:, 0], keys[:, 3]) and torch.equal(runner.cache.keys[:, 1], keys[:, 1])
    assert torch.equal(own.cache.keys, before[2])
