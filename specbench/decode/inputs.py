"""The inputs of one target forward over a step's blocks: each row's new tokens (pending, then its draft tree, then
the draft's extra branch), their positions, the cache slots they are written at (`input_pos`: row b's block from
slot starts[b], its context length) and the 4D mask under which each tree node sees its row's context and its
ancestors.

The host builds only what it must (numpy: small torch ops cost several microseconds each, and this runs every
step), for every row at once in [rows, ...] arrays (no array op per row): the token ids, positions, write and start
slots (int64) and, for a tree, each block's own [tokens, tokens] mask (a byte each), staged in ONE byte buffer and
sent to the device in one copy (non-blocking from pinned memory on CUDA); the mask over the cache's key slots is
made on the device from those, inside the forward's call (inside its CUDA graph on a captured shape), so a step's
host work does not grow with the context. Blocks are left-padded to the step's shape (every row's scored tokens
end at the forward's last column); a pad token is written past its row's real tokens (where no real query looks
and the next step overwrites it) and sees only its own slot (or, in a chain step at its own shape, its row's
earlier slots).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from specbench.decode.draft import Draft
from specbench.decode.layout import FULL_ONLY, AttentionLayout
from specbench.decode.runner import ModelRunner, Shape


@dataclass
class Blocks:
    """Every row's new tokens in a step, as arrays for the whole batch, each row LEFT-padded to the longest (as the
    forward takes them): row b's block (its pending tokens, causal; then its draft tree; then the draft's extra
    branch) is the last lengths[b] columns of its row; what the pad columns hold means nothing."""
    ids: np.ndarray  # [R, width] int64 token ids
    lengths: list[int]  # each row's block's
    positions: np.ndarray  # [R, width] int64 absolute positions
    allowed: np.ndarray | None  # [R, width, width] bool: which of its block's tokens each one sees; None: all causal

    @staticmethod
    def chains(tokens: list[list[int]], cache_lens: list[int]) -> "Blocks":
        """Blocks of causal tokens only, row b's at positions cache_lens[b], cache_lens[b] + 1, ..."""
        return row_blocks(tokens, [Draft()] * len(tokens), cache_lens)


def row_blocks(pendings: list[list[int]], drafts: list[Draft], cache_lens: list[int]) -> Blocks:
    """Every row's block: its pending tokens at positions cache_lens[b], ..., then its draft tree under the last of
    them (a node at its depth after it, seeing its ancestors), then its extra branch; the tokens, positions and
    masks of every row made at once, in one array each."""
    tokens = [pending + draft.tokens + (draft.extra.tokens if draft.extra else [])
              for pending, draft in zip(pendings, drafts)]
    lengths = list(map(len, tokens))
    rows, width = len(tokens), max(lengths)
    if min(lengths) == width:  # no padding
        ids = np.array(tokens, dtype=np.int64)
    else:
        ids = np.zeros((rows, width), dtype=np.int64)
        ids[np.arange(width) >= width - np.array(lengths)[:, None]] = np.fromiter(
            itertools.chain.from_iterable(tokens), np.int64, sum(lengths))
    if not any(draft.extra or not draft.is_chain() for draft in drafts):
        positions = [range(start + n - width, start + n) for start, n in zip(cache_lens, lengths)]
        return Blocks(ids, lengths, np.array(positions, dtype=np.int64), None)
    column, pad = np.arange(width), width - np.array(lengths)
    # Each column's parent column: a pending token's the one before it (the first's, and a pad's: itself), a tree
    # node's its parent's (ROOT, -1: the last pending token's), a branch token's the last pending token's.
    first = pad + np.array(list(map(len, pendings)))  # the column of each row's first node
    sizes = np.array(list(map(len, drafts)))
    parent = np.where(column > pad[:, None], column - 1, column)
    parent = np.where(column >= (first + sizes)[:, None], (first - 1)[:, None], parent)
    parent[(column >= first[:, None]) & (column < (first + sizes)[:, None])] = np.repeat(first, sizes) + np.fromiter(
        itertools.chain.from_iterable(draft.parents for draft in drafts), np.int64, sizes.sum())
    allowed = ancestors(parent)  # each token sees itself and its ancestors: the row's pending tokens are all of them
    positions = np.array(cache_lens)[:, None] + allowed.sum(2) - 1  # a node's: its root's plus its depth
    for b, draft in enumerate(drafts):
        if draft.extra and draft.extra.tokens:  # the branch's own positions and mask
            begin, last = first[b] + sizes[b], width
            positions[b, begin:last] = positions[b, first[b] - 1] + np.asarray(draft.extra.offsets, dtype=np.int64)
            allowed[b, begin:last, begin:last] = draft.extra.allowed.cpu().numpy()
    return Blocks(ids, lengths, positions, allowed)


def ancestors(parent: np.ndarray) -> np.ndarray:
    """[R, n, n] bool from each row's parent index of every node [R, n] (a root is its own parent): row i of a
    row's matrix holds node i and its every ancestor. By pointer jumping (each round doubles the levels covered)
    over each node's ancestors as bits, so a deep tree and a batch of trees cost a few array ops."""
    rows, n = parent.shape
    at = np.arange(rows)[:, None]
    seen = np.broadcast_to(np.packbits(np.eye(n, dtype=bool), axis=1, bitorder="little"), (rows, n, -(-n // 8))).copy()
    while True:
        seen |= seen[at, parent]
        further = parent[at, parent]
        if np.array_equal(further, parent):
            return np.unpackbits(seen, axis=2, count=n, bitorder="little").view(bool)
        parent = further


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """One host array on the device in one copy (non-blocking from pinned memory on CUDA)."""
    staged = torch.from_numpy(array)
    if device.type == "cuda":
        return staged.pin_memory().to(device, non_blocking=True)
    return staged.to(device)


@dataclass
class Staged:
    """One target forward's host inputs in ONE byte buffer on the device: per row the int64 token ids, positions,
    write slots, start slot and left padding, then (a tree step, and every step of a captured shape) each block's
    own [tokens, tokens] mask, a byte each. What a captured graph takes as its input (device_inputs makes the rest
    inside it)."""
    raw: torch.Tensor  # [R, bytes] uint8 on the device
    shape: Shape
    tree: bool  # the blocks' own masks are staged (else every block is causal)
    pads: list[int]  # left padding of each real row's block


def stage_inputs(blocks: Blocks, starts: list[int], shape: Shape, device: torch.device) -> Staged:
    """The host's part of a step's inputs: every row's block LEFT-padded to `shape` (so every row's last tokens,
    whose logits a step needs, share the forward's last columns; pad rows: empty blocks), staged and sent in one
    copy. Row b's real tokens are written from slot starts[b] (where its context ends) on, its pad tokens after
    them: column c of the row's block is slot starts[b] + (c - pad) mod tokens. A captured shape always stages the
    blocks' masks (a chain's is causal), so that one graph serves chains and trees."""
    rows, size, real_rows = shape.rows, shape.tokens, len(blocks.lengths)
    width, lengths = blocks.ids.shape[1], blocks.lengths
    tree = shape.captured or blocks.allowed is not None
    numbers = 8 * (3 * size + 2)  # bytes of the int64 part: ids, positions, write slots, start slot, padding
    local_bytes = -(-size * size // 8) * 8 if tree else 0  # the blocks' own masks, one byte each (8-aligned)
    buffer = np.zeros((rows, numbers + local_bytes), dtype=np.uint8)  # ONE buffer, ONE copy
    host = buffer[:, :numbers].view(np.int64)
    ids, positions, slots_written = host[:, :size], host[:, size : 2 * size], host[:, 2 * size : 3 * size]
    start, pads = host[:, 3 * size], host[:, 3 * size + 1]
    pad_counts = [size - n for n in lengths]
    start[:real_rows], pads[:real_rows], pads[real_rows:] = starts, pad_counts, size
    column = np.arange(size)
    ids[:real_rows, size - width :] = blocks.ids
    positions[:] = column  # a pad token's position is its slot (a pad row's: its column)
    positions[:real_rows, size - width :] = blocks.positions
    if min(lengths) < size:
        pad = column < pads[:real_rows, None]
        positions[:real_rows][pad] = (column + (start + size - pads)[:real_rows, None])[pad]
    slots_written[:] = start[:, None] + (column - pads[:, None]) % size
    if tree:
        local = buffer[:, numbers : numbers + size * size].reshape(rows, size, size)
        own = blocks.allowed
        if own is None:  # a chain step at a captured shape: causal over each row's real tokens
            own = np.tri(width, dtype=bool)
            if min(lengths) < width:
                own = own & (np.arange(width) >= width - np.array(lengths)[:, None])[:, None, :]
        local[:real_rows, size - width :, size - width :] = own
        local[:, column, column] = 1  # a pad query sees its own slot (a real one sees itself already)
    return Staged(to_device(buffer, device), shape, tree, pad_counts)


def device_inputs(raw: torch.Tensor, shape: Shape, tree: bool, dtype: torch.dtype,
                  layout: AttentionLayout = FULL_ONLY) -> dict[str, torch.Tensor | dict[str, torch.Tensor]]:
    """The model's keyword arguments from a staged buffer (stage_inputs), made on the device: the token ids, the
    positions, the write slots (`input_pos`) and the additive masks over the cache's key slots (a row's context,
    then its block's own mask at the slots its block is written to), so that a step's host work does not grow with
    the context; inside the captured graph on a captured shape."""
    rows, size, slots = shape.rows, shape.tokens, shape.key_slots
    numbers = 8 * (3 * size + 2)
    staged = raw[:, :numbers].view(torch.int64)
    position_ids, input_pos = staged[:, size : 2 * size], staged[:, 2 * size : 3 * size]
    start_slots, pad = staged[:, 3 * size, None], staged[:, 3 * size + 1, None]
    key = torch.arange(slots, device=raw.device)
    if not tree:  # slot s holds position s: a query at position p sees the slots up to p
        allowed = key[None, None, :] <= position_ids[:, :, None]
        key_positions = key.expand(rows, -1)
    else:
        relative = key[None, :] - start_slots  # [R, K]: the key's slot after the row's context (< 0: context)
        in_block = (relative >= 0) & (relative < size)
        column = (relative + pad).remainder(size)  # the block column written at that slot
        local = raw[:, numbers : numbers + size * size].reshape(rows, size, size).bool()
        real = torch.arange(size, device=raw.device)[None, :] >= pad  # [R, N]: the queries that are not pads
        allowed = ((relative < 0)[:, None, :] & real[:, :, None]) | (
            local.gather(2, column[:, None, :].expand(rows, size, slots)) & in_block[:, None, :])
        key_positions = torch.where(in_block, position_ids.gather(1, column), key[None, :])
    masks = layout.masks(allowed, position_ids, key_positions if layout.windows else None, dtype)
    return {"input_ids": staged[:, :size], "position_ids": position_ids, "input_pos": input_pos,
            "attention_mask": masks}


def target_forward(runner: ModelRunner, blocks: Blocks, starts: list[int], shape: Shape, keep: int,
                   hidden: bool, dtype: torch.dtype, device: torch.device, layout: AttentionLayout = FULL_ONLY
                   ) -> tuple[Any, list[int]]:
    """The target's forward over the rows' blocks at `shape` (ModelRunner.fit). dtype and device: the model's (read
    once per generation: finding them walks the model's parameters). Returns the output and each row's left
    padding."""
    staged = stage_inputs(blocks, starts, shape, device)
    return staged_forward(runner, staged, keep, hidden, dtype, layout), staged.pads


def staged_forward(runner: ModelRunner, staged: Staged, keep: int, hidden: bool, dtype: torch.dtype,
                   layout: AttentionLayout = FULL_ONLY) -> Any:
    """The target's forward with the staged buffer as its one input: the device-side inputs are made inside the
    call (inside the captured graph on a captured shape)."""
    return runner.forward({"staged": staged.raw}, staged.shape, keep, hidden,
                          lambda given: device_inputs(given["staged"], staged.shape, staged.tree, dtype, layout))
