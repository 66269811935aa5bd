"""The inputs of one target forward over a step's blocks: each row's new tokens (pending, then its draft tree, then
the draft's extra branch), their positions, the cache slots they are written at (`input_pos`: row b's block from
slot starts[b], its context length) and the 4D mask under which each tree node sees its row's context and its
ancestors.

The host builds only what it must (numpy: small torch ops cost several microseconds each, and this runs every
step): the token ids, positions, write and start slots (int64) and, for a tree, each block's own [tokens, tokens]
mask (a byte each), staged in ONE byte buffer and sent to the device in one copy (non-blocking from pinned memory on
CUDA); the mask over the cache's key slots is made on the device from those, inside the forward's call (inside its
CUDA graph on a captured shape), so a step's host work does not grow with the context. Blocks are
left-padded to the step's shape (every row's scored tokens end at the forward's last column); a pad token is written
past its row's real tokens (where no real query looks and the next step overwrites it) and sees only its own slot
(or, in a chain step at its own shape, its row's earlier slots).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from specbench.decode.draft import Draft
from specbench.decode.layout import FULL_ONLY, AttentionLayout
from specbench.decode.runner import ModelRunner, Shape


@dataclass
class Block:
    """One row's new tokens in a step: pending (causal), its draft tree, then the draft's extra branch."""
    tokens: list[int]
    positions: np.ndarray  # [n] int64 absolute positions
    allowed: np.ndarray | None  # [n, n] bool: which of the block's tokens each one attends to; None: causal (a chain)


def row_block(pending: list[int], draft: Draft, cache_len: int) -> Block:
    """Row's block: its pending tokens at positions cache_len, ..., then its draft tree under the last of them."""
    return row_blocks([pending], [draft], [cache_len])[0]


def row_blocks(pendings: list[list[int]], drafts: list[Draft], cache_lens: list[int]) -> list[Block]:
    """Every row's block (row_block); the trees' positions and masks made for all their rows at once, in one array
    each (a row's block holds views of them)."""
    blocks: list[Block | None] = [None] * len(drafts)
    for b, (pending, draft, cache_len) in enumerate(zip(pendings, drafts, cache_lens)):
        if not draft.extra and draft.is_chain():
            tokens = pending + draft.tokens
            blocks[b] = Block(tokens, np.arange(cache_len, cache_len + len(tokens), dtype=np.int64), None)
    trees = [b for b, block in enumerate(blocks) if block is None]
    if trees:
        ancestor = tree_ancestors([drafts[b].parents for b in trees])  # [T, n, n]
        pending = np.array([len(pendings[b]) for b in trees])
        root = np.array([cache_lens[b] for b in trees]) + pending - 1
        nodes = np.arange(ancestor.shape[1])
        width = pending.max() + len(nodes) + max(len(drafts[b].extra.tokens) if drafts[b].extra else 0 for b in trees)
        column = np.arange(width)
        positions = root[:, None] + 1 - pending[:, None] + column
        # Pending tokens causal; everything after them sees them all.
        allowed = (column < pending[:, None, None]) & (column <= column[:, None])
        at, node_at = np.arange(len(trees))[:, None], pending[:, None] + nodes  # [T, n]: a node's block column
        positions[at, node_at] = root[:, None] + ancestor.sum(2)  # a node's depth: its ancestors and itself
        allowed[at[:, :, None], node_at[:, :, None], node_at[:, None, :]] = ancestor
        for t, b in enumerate(trees):
            draft, first = drafts[b], pending[t] + len(drafts[b])
            extra = draft.extra.tokens if draft.extra else []
            if extra:  # the branch's own positions and mask (written over what the padding of the trees put there)
                positions[t, first : first + len(extra)] = root[t] + np.asarray(draft.extra.offsets, dtype=np.int64)
                allowed[t, first : first + len(extra), first : first + len(extra)] = draft.extra.allowed.cpu().numpy()
            total = first + len(extra)
            blocks[b] = Block(pendings[b] + draft.tokens + extra, positions[t, :total], allowed[t, :total, :total])
    return blocks  # type: ignore[return-value]


def tree_ancestors(trees: list[list[int]]) -> np.ndarray:
    """[trees, n, n] bool for the longest n: row i of a tree holds node i and its every ancestor (a tree's pad
    nodes are roots of their own). By pointer jumping (each round doubles the levels covered), so a deep tree and a
    batch of trees cost a few array ops rather than one per node."""
    n = max(map(len, trees))
    jump = np.tile(np.arange(n, dtype=np.int64), (len(trees), 1))
    for b, parents in enumerate(trees):
        jump[b, : len(parents)] = parents
    jump = np.where(jump < 0, np.arange(n), jump)  # a root jumps to itself
    ancestor = np.broadcast_to(np.eye(n, dtype=bool), (len(trees), n, n)).copy()
    rows = np.arange(len(trees))[:, None]
    while True:
        ancestor |= ancestor[rows, jump]
        further = jump[rows, jump]
        if np.array_equal(further, jump):
            return ancestor
        jump = further


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


def stage_inputs(blocks: list[Block], starts: list[int], shape: Shape, device: torch.device) -> Staged:
    """The host's part of a step's inputs: every row's block LEFT-padded to `shape` (so every row's last tokens,
    whose logits a step needs, share the forward's last columns; pad rows: empty blocks), staged and sent in one
    copy. Row b's real tokens are written from slot starts[b] (where its context ends) on, its pad tokens after
    them: column c of the row's block is slot starts[b] + (c - pad) mod tokens. A captured shape always stages the
    blocks' masks (a chain's is causal), so that one graph serves chains and trees."""
    rows, size = shape.rows, shape.tokens
    tree = shape.captured or any(block.allowed is not None for block in blocks)
    numbers = 8 * (3 * size + 2)  # bytes of the int64 part: ids, positions, write slots, start slot, padding
    local_bytes = -(-size * size // 8) * 8 if tree else 0  # the blocks' own masks, one byte each (8-aligned)
    buffer = np.zeros((rows, numbers + local_bytes), dtype=np.uint8)  # ONE buffer, ONE copy
    host = buffer[:, :numbers].view(np.int64)
    ids, positions, slots_written = host[:, :size], host[:, size : 2 * size], host[:, 2 * size : 3 * size]
    start, pads = host[:, 3 * size], host[:, 3 * size + 1]
    positions[:] = np.arange(size)  # a pad token's position is its slot (a pad row's: its column)
    pads[:] = size
    for b, (block, first) in enumerate(zip(blocks, starts)):
        n = len(block.tokens)
        pad = size - n
        ids[b, pad:] = block.tokens
        positions[b, pad:] = block.positions
        positions[b, :pad] += first + n
        start[b], pads[b] = first, pad
    slots_written[:] = start[:, None] + (np.arange(size) - pads[:, None]) % size
    if tree:
        local = buffer[:, numbers : numbers + size * size].reshape(rows, size, size)
        local[:, range(size), range(size)] = 1  # a pad query sees its own slot
        for b, block in enumerate(blocks):
            n = len(block.tokens)
            local[b, size - n :, size - n :] = block.allowed if block.allowed is not None else np.tri(n, dtype=bool)
    return Staged(to_device(buffer, device), shape, tree, [size - len(b.tokens) for b in blocks])


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


def target_forward(runner: ModelRunner, blocks: list[Block], starts: list[int], shape: Shape, keep: int,
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
