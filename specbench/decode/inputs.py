"""The inputs of one target forward over a step's blocks: each row's new tokens (pending, then its draft tree, then
the draft's extra branch), their positions, and the 4D mask under which each tree node sees its row's context and
its ancestors. Built with numpy: this runs every step, where small torch ops cost several microseconds each; on
the static runtime only each row's block part is built so, and the mask over the whole cache on the device."""
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

    def named(self) -> dict[str, torch.Tensor | dict[str, torch.Tensor] | None]:
        """The model's keyword arguments (a static forward's inputs, which its captured graph copies)."""
        return {"input_ids": self.input_ids, "position_ids": self.position_ids, "attention_mask": self.attention_mask}


def batch_inputs(blocks: list[Block], cache_lens: list[int], width: int, dtype: torch.dtype,
                 device: torch.device, layout: AttentionLayout = FULL_ONLY,
                 shape: tuple[int, int, int] | None = None) -> TreeInputs:
    """Inputs for one forward over every row's block, left-padded to the longest; the cache holds `width` slots per
    row of which row b's first cache_lens[b] are real (slot s holds position s). shape: (rows, tokens, key slots)
    to pad to (the static runtime's fixed shapes: pad rows and pad tokens see only themselves; keys past the block
    are hidden; the mask is built on the device, see static_masks), else the blocks' own."""
    rows, size, slots = shape or (len(blocks), max(len(b.tokens) for b in blocks), 0)
    blocks = blocks + [Block([], torch.zeros(0, dtype=torch.long), torch.zeros(0, 0, dtype=torch.bool), True)] * (
        rows - len(blocks))
    cache_lens = cache_lens + [0] * (rows - len(cache_lens))
    slots = max(slots, width + size)
    pads = [size - len(b.tokens) for b in blocks]
    input_ids = torch.tensor([[0] * pad + b.tokens for b, pad in zip(blocks, pads)], dtype=torch.long)
    positions = torch.from_numpy(np.stack([np.concatenate([np.full(pad, length, dtype=np.int64), b.positions.numpy()])
                                           for b, pad, length in zip(blocks, pads, cache_lens)]))
    if shape is not None:
        positions = positions.to(device)
        masks = static_masks(blocks, pads, cache_lens, positions, width, slots, layout, dtype)
        return TreeInputs(input_ids.to(device), positions, masks, pads)
    if all(b.chain for b in blocks) and not any(pads) and all(n == width for n in cache_lens):
        # Ordinary causal continuations of equal length: let the model build its own (fast) masks.
        return TreeInputs(input_ids.to(device), positions.to(device), None, pads)
    seen = np.zeros((rows, size, slots), dtype=bool)  # in numpy: small ops, every step
    fill_seen(seen, blocks, pads, cache_lens, width)
    keys = key_positions(positions, width, slots) if layout.windows else None
    masks = layout.masks(torch.from_numpy(seen), positions, keys, dtype)
    masks = {k: m.to(device) for k, m in masks.items()} if isinstance(masks, dict) else masks.to(device)
    return TreeInputs(input_ids.to(device), positions.to(device), masks, pads)


def fill_seen(seen: np.ndarray, blocks: list[Block], pads: list[int], cache_lens: list[int], width: int) -> None:
    """The mask rule, into seen [rows, size, slots]: a real query sees its row's context (the first cache_lens[b]
    slots) and what its block allows of the block's tokens (landed at slots [width + pad, width + size)); a pad
    query sees itself only."""
    size = seen.shape[1]
    for row, (block, pad, length) in enumerate(zip(blocks, pads, cache_lens)):
        if length:
            seen[row, pad:, :length] = True
        seen[row, pad:, width + pad : width + size] = block.allowed.numpy()
        if pad:
            seen[row, range(pad), range(width, width + pad)] = True


def key_positions(positions: torch.Tensor, width: int, slots: int) -> torch.Tensor:
    """[rows, slots] the position each key slot holds, on positions' device: slot s < width holds s, the block's
    slots its positions [rows, size], the slots past them 0 (hidden by the mask anyway)."""
    rows, size = positions.shape
    before = torch.arange(width, device=positions.device).expand(rows, -1)
    return torch.cat([before, positions, positions.new_zeros(rows, slots - width - size)], dim=1)


def static_masks(blocks: list[Block], pads: list[int], cache_lens: list[int], positions: torch.Tensor, width: int,
                 slots: int, layout: AttentionLayout, dtype: torch.dtype) -> torch.Tensor | dict[str, torch.Tensor]:
    """The masks over all `slots` key slots of the static cache, built on positions' device: the host fills only
    each row's block part [rows, size, size] (fill_seen with no context) and copies it, the cache lengths and the
    pads; the context part (slot < cache_lens[b] for a real query) and the hidden slots past the block are made
    on the device, so a step's host work does not grow with the cache."""
    rows, size = positions.shape
    device = positions.device
    local = np.zeros((rows, size, size), dtype=bool)
    fill_seen(local, blocks, pads, [0] * rows, 0)
    block = torch.from_numpy(local).to(device)
    lengths, starts = torch.tensor([cache_lens, pads], dtype=torch.long).to(device)
    real = torch.arange(size, device=device) >= starts[:, None]  # [rows, size]: the queries that are not pads
    context = (torch.arange(width, device=device) < lengths[:, None, None]) & real[:, :, None]
    beyond = torch.zeros(rows, size, slots - width - size, dtype=torch.bool, device=device)
    keys = key_positions(positions, width, slots) if layout.windows else None
    return layout.masks(torch.cat([context, block, beyond], dim=2), positions, keys, dtype)


def tree_inputs(pending: list[int], draft: Draft, cache_len: int, dtype: torch.dtype,
                device: torch.device, layout: AttentionLayout = FULL_ONLY) -> TreeInputs:
    """The one-row case: inputs for scoring `pending`, then the draft tree, then its extra branch."""
    return batch_inputs([row_block(pending, draft, cache_len)], [cache_len], cache_len, dtype, device, layout)
