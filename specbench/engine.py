"""The one decode loop. Every method, vanilla included, runs through `generate_batch` (`generate` is its one-row
case).

Each step: each row's drafter proposes a tree; ONE target forward scores, for every row, the tokens not yet in its
cache (the last emitted token, plus the whole prompt on the first step) followed by its tree, under a 4D mask in
which each tree node sees its row's context and its ancestors; verification picks each row's accepted path and
bonus token; the KV cache keeps each row's accepted path only. The bonus token is not yet in the cache: it is the
root of the next step.

Rows advance by different lengths, so the cache is a [B, heads, width, dim] block in which row b's first
`cache_len[b]` slots are its context and the rest are masked out; each step's new block is left-padded per row to a
common length (pad queries see only themselves), positions are per row. A finished row leaves the batch at once.
With one row there is no padding and no hole: the forward is exactly the single-sequence one.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel

from specbench.draft import ROOT, DecodeContext, Draft, Drafter, StepResult
from specbench.kv import compact_cache, gather_rows, new_cache
from specbench.layout import AttentionLayout
from specbench.runtime import synchronize
from specbench.sampling import Sampling
from specbench.verify import Verdict, VerifyFn, verify_lossless


@dataclass
class Generation:
    token_ids: list[int]  # new tokens only
    accept_lengths: list[int]  # tokens emitted per target forward (bonus included)
    draft_times: list[float]  # seconds per step spent in the drafter
    verify_times: list[float]  # seconds per step in the target forward, verification and cache compaction
    wall_time: float  # whole generation, prefill included
    stop_reason: str  # "eos", "length" or "context"
    tree_sizes: list[int] = field(default_factory=list)  # draft nodes verified per step
    # Per step: the accepted path ended at a leaf of a non-empty tree (every drafted level on it accepted), so the
    # bonus token was drawn after a fully accepted path.
    full_paths: list[bool] = field(default_factory=list)


@dataclass
class Block:
    """One row's new tokens in a step: pending (causal), its draft tree, then the draft's extra branch."""
    tokens: list[int]
    positions: torch.Tensor  # [n] absolute positions
    allowed: torch.Tensor  # [n, n] bool: which of the block's tokens each one attends to (besides the context)
    chain: bool  # a plain causal continuation


def row_block(pending: list[int], draft: Draft, cache_len: int) -> Block:
    n_pending, n = len(pending), len(draft)
    extra = draft.extra
    m = len(extra.tokens) if extra else 0
    tokens = pending + draft.tokens + (extra.tokens if extra else [])
    total = n_pending + n + m
    if draft.is_chain() and not extra:
        positions = torch.arange(cache_len, cache_len + total)
        return Block(tokens, positions, torch.ones(total, total, dtype=torch.bool).tril(), True)
    root = cache_len + n_pending - 1
    depth = torch.tensor(draft.depths(), dtype=torch.long)
    offsets = torch.tensor(extra.offsets if extra else [], dtype=torch.long)
    positions = torch.cat([torch.arange(cache_len, cache_len + n_pending), root + depth, root + offsets])
    ancestor = torch.eye(n, dtype=torch.bool)
    for i, parent in enumerate(draft.parents):
        if parent >= 0:
            ancestor[i] |= ancestor[parent]
    allowed = torch.zeros(total, total, dtype=torch.bool)
    allowed[:n_pending, :n_pending] = torch.ones(n_pending, n_pending, dtype=torch.bool).tril()
    allowed[n_pending:, :n_pending] = True
    allowed[n_pending : n_pending + n, n_pending : n_pending + n] = ancestor
    if extra:
        allowed[n_pending + n :, n_pending + n :] = extra.allowed
    return Block(tokens, positions, allowed, False)


@dataclass
class TreeInputs:
    input_ids: torch.Tensor  # [B, N]
    position_ids: torch.Tensor  # [B, N]
    # [B, 1, N, width + N] additive (one per layer kind for sliding-window models), or None: a plain causal forward
    attention_mask: torch.Tensor | dict[str, torch.Tensor] | None
    pads: list[int]  # left padding of each row's block


def batch_inputs(blocks: list[Block], cache_lens: list[int], width: int, dtype: torch.dtype,
                 device: torch.device, layout: AttentionLayout = AttentionLayout()) -> TreeInputs:
    """Inputs for one forward over every row's block, left-padded to the longest; the cache holds `width` slots per
    row of which row b's first cache_lens[b] are real (slot s holds position s)."""
    size = max(len(b.tokens) for b in blocks)
    pads = [size - len(b.tokens) for b in blocks]
    input_ids = torch.tensor([[0] * pad + b.tokens for b, pad in zip(blocks, pads)], dtype=torch.long)
    positions = torch.stack([torch.cat([torch.full((pad,), length, dtype=torch.long), b.positions])
                             for b, pad, length in zip(blocks, pads, cache_lens)])
    if all(b.chain for b in blocks) and not any(pads) and all(length == width for length in cache_lens):
        # Ordinary causal continuations of equal length: let the model build its own (fast) masks.
        return TreeInputs(input_ids.to(device), positions.to(device), None, pads)
    allowed = torch.zeros(len(blocks), size, width + size, dtype=torch.bool)
    for row, (block, pad, length) in enumerate(zip(blocks, pads, cache_lens)):
        allowed[row, pad:, :length] = True
        allowed[row, pad:, width + pad :] = block.allowed
        allowed[row, range(pad), range(width, width + pad)] = True  # a pad query sees itself only
    keys = torch.cat([torch.arange(width).expand(len(blocks), -1), positions], dim=1) if layout.windows else None
    masks = layout.masks(allowed, positions, keys, dtype)
    masks = {k: m.to(device) for k, m in masks.items()} if isinstance(masks, dict) else masks.to(device)
    return TreeInputs(input_ids.to(device), positions.to(device), masks, pads)


def tree_inputs(pending: list[int], draft: Draft, cache_len: int, dtype: torch.dtype,
                device: torch.device, layout: AttentionLayout = AttentionLayout()) -> TreeInputs:
    """The one-row case: inputs for scoring `pending`, then the draft tree, then its extra branch."""
    return batch_inputs([row_block(pending, draft, cache_len)], [cache_len], cache_len, dtype, device, layout)


def context_limit(model: PreTrainedModel) -> int:
    return int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)


def compact(cache: DynamicCache, kept: list[tuple[int, list[int]]], live: list[int]) -> int:
    """Keep the live rows; row b keeps its first kept[b][0] slots, then the slots kept[b][1], packed at the front.
    Returns the new width. A lone row needs no gather (its context is a prefix of the cache)."""
    if len(kept) == 1:
        context, extra = kept[0]
        compact_cache(cache, context, extra)
        return context + len(extra)
    if not live:
        return 0
    return gather_rows(cache, live, [list(range(kept[b][0])) + kept[b][1] for b in live])


def emitted_tokens(draft: Draft, verdict: Verdict, remaining: int, stop_ids: set[int]) -> tuple[list[int], bool]:
    """What a step emits: the accepted draft tokens, then the bonus token, cut to the row's remaining budget and
    after the first stop id (which is kept). Returns the tokens and whether a stop id ended them."""
    emitted = ([draft.tokens[i] for i in verdict.path] + [verdict.bonus])[:remaining]
    for j, token in enumerate(emitted):
        if token in stop_ids:
            return emitted[: j + 1], True
    return emitted, False


@dataclass
class Row:
    """One sequence of a batch while it decodes."""
    ctx: DecodeContext
    drafter: Drafter
    budget: int
    result: Generation
    cache_len: int = 0
    pending_draft_time: float = 0.0  # begin() time, charged to the first step


def generate(
    model: PreTrainedModel,
    prompt_ids: list[int],
    drafter: Drafter,
    sampling: Sampling,
    max_new_tokens: int,
    stop_ids: set[int],
    generator: torch.Generator | None = None,
    verify: VerifyFn | None = None,
) -> Generation:
    """Decode up to max_new_tokens after prompt_ids with the drafter's proposals (one row of generate_batch)."""
    return generate_batch(model, [prompt_ids], [drafter], sampling, max_new_tokens, stop_ids, [generator], verify)[0]


@torch.inference_mode()
def generate_batch(
    model: PreTrainedModel,
    prompts: list[list[int]],
    drafters: list[Drafter],
    sampling: Sampling,
    max_new_tokens: int,
    stop_ids: set[int],
    generators: list[torch.Generator | None] | None = None,
    verify: VerifyFn | None = None,
) -> list[Generation]:
    """Decode every prompt at once, row b with drafters[b] (one drafter object per row: drafters keep per-sequence
    state) and generators[b]; losslessly unless the drafters bring their own verifier (the same for every row).
    Each row stops after its first stop id (kept in the output), at max_new_tokens, or when the model's context is
    full: the same rule for every method. A prompt that already fills the context (a later turn after long
    answers) yields no tokens and stop_reason "context", for every method alike. A row's wall_time runs from the
    batch's start to the step that finished it; its verify_times are the batch's (shared) forwards."""
    if not prompts or any(not p for p in prompts):
        raise ValueError("empty prompt")
    if len(drafters) != len(prompts) or len({id(d) for d in drafters}) != len(drafters):
        raise ValueError("one distinct drafter per prompt")
    if max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be > 0, got {max_new_tokens}")
    generators = generators or [None] * len(prompts)
    limit = context_limit(model)
    verify = verify or drafters[0].verifier or verify_lossless
    device, dtype = model.device, model.dtype
    synchronize(device)
    started = time.perf_counter()
    rows: list[Row] = []
    for prompt, drafter, generator in zip(prompts, drafters, generators):
        budget = max(0, min(max_new_tokens, limit - len(prompt)))
        result = Generation([], [], [], [], 0.0, "length" if budget == max_new_tokens else "context")
        rows.append(Row(DecodeContext(list(prompt), len(prompt), sampling, generator), drafter, budget, result))
    active = [row for row in rows if row.budget > 0]
    for row in active:
        t0 = time.perf_counter()
        row.drafter.begin(row.ctx)
        row.pending_draft_time = time.perf_counter() - t0
    layout = AttentionLayout.of(model.config)
    cache = new_cache()
    width = 0  # cache slots per row
    while active:
        drafts = []
        for row in active:
            t0 = time.perf_counter()
            remaining = row.budget - len(row.result.token_ids)
            drafts.append(row.drafter.propose(row.ctx).limited(remaining - 1) if remaining > 1 else Draft())
            row.pending_draft_time += time.perf_counter() - t0
        t1 = time.perf_counter()
        blocks = [row_block(row.ctx.token_ids[row.cache_len:], d, row.cache_len) for row, d in zip(active, drafts)]
        inputs = batch_inputs(blocks, [row.cache_len for row in active], width, dtype, device, layout)
        keep = max(len(d) + 1 + (len(d.extra.tokens) if d.extra else 0) for d in drafts)
        any_hidden = any(row.drafter.hidden_layers for row in active)
        out = model(
            input_ids=inputs.input_ids,
            position_ids=inputs.position_ids,
            attention_mask=inputs.attention_mask,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=keep,
            output_hidden_states=any_hidden,
        )
        size = inputs.input_ids.shape[1]
        kept: list[tuple[int, list[int]]] = []
        steps: list[StepResult] = []
        for b, (row, draft, pad) in enumerate(zip(active, drafts, inputs.pads)):
            n_extra = len(draft.extra.tokens) if draft.extra else 0
            logits = out.logits[b, keep - (len(draft) + 1 + n_extra):].float()
            extra_logits = None
            if n_extra:
                extra_logits, logits = logits[len(draft) + 1 :], logits[: len(draft) + 1]
            verdict = verify(draft, logits, sampling, row.ctx.generator)
            n_pending = len(row.ctx.token_ids) - row.cache_len
            start = width + pad  # where the row's block landed in the cache
            kept.append((row.cache_len, list(range(start, start + n_pending))
                         + [start + n_pending + i for i in verdict.path]))
            emitted, stopped = emitted_tokens(draft, verdict, row.budget - len(row.result.token_ids), stop_ids)
            if stopped:
                row.result.stop_reason = "eos"
            hidden = None
            if row.drafter.hidden_layers:
                positions = [pad + j for j in range(n_pending)] + [pad + n_pending + i for i in verdict.path]
                hidden = torch.cat([out.hidden_states[i][b][positions] for i in row.drafter.hidden_layers], dim=-1)
            row.cache_len += n_pending + len(verdict.path)
            row.ctx.token_ids.extend(emitted)
            row.result.token_ids.extend(emitted)
            steps.append(StepResult(emitted, verdict.path, hidden, extra_logits, draft, logits))
            row.result.accept_lengths.append(len(emitted))
            row.result.tree_sizes.append(len(draft))
            end = verdict.path[-1] if verdict.path else ROOT
            row.result.full_paths.append(bool(draft) and end not in draft.parents)  # the path ended at a leaf
        live = [b for b, row in enumerate(active)
                if row.result.stop_reason != "eos" and len(row.result.token_ids) < row.budget]
        width = compact(cache, kept, live)
        t2 = time.perf_counter()
        for row, step in zip(active, steps):
            if row.result.stop_reason != "eos":
                t0 = time.perf_counter()
                row.drafter.accepted(row.ctx, step)
                row.pending_draft_time += time.perf_counter() - t0
        t3 = time.perf_counter()
        for row in active:
            row.result.draft_times.append(row.pending_draft_time)
            row.result.verify_times.append(t2 - t1)
            row.pending_draft_time = 0.0
        for b, row in enumerate(active):
            if b not in live:
                synchronize(device)
                row.result.wall_time = time.perf_counter() - started
        active = [active[b] for b in live]
    synchronize(device)
    for row in rows:
        if row.budget == 0:
            row.result.wall_time = time.perf_counter() - started
    return [row.result for row in rows]
