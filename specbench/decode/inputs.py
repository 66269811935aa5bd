"""The inputs of one target forward over a step's blocks: each row's new tokens (pending, then its draft tree, then
the draft's extra branch), their positions, and the 4D mask under which each tree node sees its row's context and
its ancestors. Built with numpy: this runs every step, where small torch ops cost several microseconds each."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from specbench.decode.draft import Draft
from specbench.decode.layout import FULL_ONLY, AttentionLayout


@dataclass
class Block:
    """One row's new tokens in a step: pending (causal), its draft tree, then the draft's extra branch."""
    tokens: list[int]
    positions: torch.Tensor  # [n] absolute positions
    allowed: torch.Tensor  # [n, n] bool: which of the block's tokens each one attends to (besides the context)
    chain: bool  # a plain causal continuation


def row_block(pending: list[int], draft: Draft, cache_len: int) -> Block:
    """Built in numpy (a few microseconds per small op, where torch takes several): this runs every step."""
    n_pending, n = len(pending), len(draft)
    extra = draft.extra
    m = len(extra.tokens) if extra else 0
    tokens = pending + draft.tokens + (extra.tokens if extra else [])
    total = n_pending + n + m
    if draft.is_chain() and not extra:
        positions = torch.arange(cache_len, cache_len + total)
        return Block(tokens, positions, torch.ones(total, total, dtype=torch.bool).tril(), True)
    root = cache_len + n_pending - 1
    positions = np.concatenate([np.arange(cache_len, cache_len + n_pending), root + np.asarray(draft.depths()),
                                root + np.asarray(extra.offsets if extra else [], dtype=np.int64)])
    allowed = np.zeros((total, total), dtype=bool)
    allowed[:n_pending, :n_pending] = np.tri(n_pending, dtype=bool)
    allowed[n_pending:, :n_pending] = True
    allowed[n_pending : n_pending + n, n_pending : n_pending + n] = ancestors(draft.parents).numpy()
    if extra:
        allowed[n_pending + n :, n_pending + n :] = extra.allowed.cpu().numpy()
    return Block(tokens, torch.from_numpy(positions.astype(np.int64)), torch.from_numpy(allowed), False)


def ancestors(parents: list[int]) -> torch.Tensor:
    """[n, n] bool: node i's row holds i and every ancestor of i. By pointer jumping (each round doubles the levels
    covered), so a deep tree costs a few array ops rather than one per node."""
    n = len(parents)
    jump = np.array([p if p >= 0 else i for i, p in enumerate(parents)], dtype=np.int64)
    ancestor = np.eye(n, dtype=bool)
    while True:
        ancestor |= ancestor[jump]
        further = jump[jump]
        if np.array_equal(further, jump):
            return torch.from_numpy(ancestor)
        jump = further


@dataclass
class TreeInputs:
    input_ids: torch.Tensor  # [B, N]
    position_ids: torch.Tensor  # [B, N]
    # [B, 1, N, width + N] additive (one per layer kind for sliding-window models), or None: a plain causal forward
    attention_mask: torch.Tensor | dict[str, torch.Tensor] | None
    pads: list[int]  # left padding of each row's block


def batch_inputs(blocks: list[Block], cache_lens: list[int], width: int, dtype: torch.dtype,
                 device: torch.device, layout: AttentionLayout = FULL_ONLY,
                 shape: tuple[int, int, int] | None = None) -> TreeInputs:
    """Inputs for one forward over every row's block, left-padded to the longest; the cache holds `width` slots per
    row of which row b's first cache_lens[b] are real (slot s holds position s). shape: (rows, tokens, key slots)
    to pad to (the static runtime's fixed shapes: pad rows and pad tokens see only themselves; keys past the block
    are hidden), else the blocks' own."""
    rows, size, slots = shape or (len(blocks), max(len(b.tokens) for b in blocks), 0)
    blocks = blocks + [Block([], torch.zeros(0, dtype=torch.long), torch.zeros(0, 0, dtype=torch.bool), True)] * (
        rows - len(blocks))
    cache_lens = cache_lens + [0] * (rows - len(cache_lens))
    slots = max(slots, width + size)
    pads = [size - len(b.tokens) for b in blocks]
    input_ids = torch.tensor([[0] * pad + b.tokens for b, pad in zip(blocks, pads)], dtype=torch.long)
    positions = torch.from_numpy(np.stack([np.concatenate([np.full(pad, length, dtype=np.int64), b.positions.numpy()])
                                           for b, pad, length in zip(blocks, pads, cache_lens)]))
    if shape is None and all(b.chain for b in blocks) and not any(pads) and all(n == width for n in cache_lens):
        # Ordinary causal continuations of equal length: let the model build its own (fast) masks.
        return TreeInputs(input_ids.to(device), positions.to(device), None, pads)
    seen = np.zeros((rows, size, slots), dtype=bool)  # in numpy: small ops, every step
    for row, (block, pad, length) in enumerate(zip(blocks, pads, cache_lens)):
        seen[row, pad:, :length] = True
        seen[row, pad:, width + pad : width + size] = block.allowed.numpy()
        seen[row, range(pad), range(width, width + pad)] = True  # a pad query sees itself only
    allowed = torch.from_numpy(seen)
    keys = None
    if layout.windows:
        beyond = torch.zeros(rows, slots - width - size, dtype=torch.long)
        keys = torch.cat([torch.arange(width).expand(rows, -1), positions, beyond], dim=1)
    masks = layout.masks(allowed, positions, keys, dtype)
    masks = {k: m.to(device) for k, m in masks.items()} if isinstance(masks, dict) else masks.to(device)
    return TreeInputs(input_ids.to(device), positions.to(device), masks, pads)


def tree_inputs(pending: list[int], draft: Draft, cache_len: int, dtype: torch.dtype,
                device: torch.device, layout: AttentionLayout = FULL_ONLY) -> TreeInputs:
    """The one-row case: inputs for scoring `pending`, then the draft tree, then its extra branch."""
    return batch_inputs([row_block(pending, draft, cache_len)], [cache_len], cache_len, dtype, device, layout)
