"""The one decode loop. Every method, vanilla included, runs through `generate`.

Each step: the drafter proposes a tree; ONE target forward scores the tokens not yet in the cache (the last emitted
token, plus the whole prompt on the first step) followed by the tree, under a 4D mask in which each tree node sees
the context and its ancestors; verification picks the accepted path and a bonus token; the KV cache keeps the
accepted path only. The bonus token is not yet in the cache: it is the root of the next step.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel

from specbench.draft import ROOT, DecodeContext, Draft, Drafter, StepResult
from specbench.kv import compact_cache
from specbench.runtime import synchronize
from specbench.sampling import Sampling
from specbench.verify import VerifyFn, verify_lossless


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
class TreeInputs:
    input_ids: torch.Tensor  # [1, P + n]
    position_ids: torch.Tensor  # [1, P + n]
    attention_mask: torch.Tensor | None  # [1, 1, P + n, L + P + n] additive, or None for a plain causal forward


def tree_inputs(
    pending: list[int], draft: Draft, cache_len: int, dtype: torch.dtype, device: torch.device
) -> TreeInputs:
    """Inputs for scoring `pending` (tokens not yet cached, causal), then the draft tree, then its extra branch."""
    n_pending, n = len(pending), len(draft)
    extra = draft.extra
    m = len(extra.tokens) if extra else 0
    input_ids = torch.tensor([pending + draft.tokens + (extra.tokens if extra else [])], dtype=torch.long, device=device)
    if draft.is_chain() and not extra:
        # A chain is an ordinary causal continuation: let the model build its own (fast) mask.
        positions = torch.arange(cache_len, cache_len + n_pending + n, device=device)
        return TreeInputs(input_ids, positions.unsqueeze(0), None)
    root = cache_len + n_pending - 1
    depth = torch.tensor(draft.depths(), dtype=torch.long)
    offsets = torch.tensor(extra.offsets if extra else [], dtype=torch.long)
    positions = torch.cat([torch.arange(cache_len, cache_len + n_pending), root + depth, root + offsets])
    ancestor = torch.eye(n, dtype=torch.bool)
    for i, parent in enumerate(draft.parents):
        if parent >= 0:
            ancestor[i] |= ancestor[parent]
    total = n_pending + n + m
    allowed = torch.zeros(total, cache_len + total, dtype=torch.bool)
    allowed[:, :cache_len] = True
    allowed[:n_pending, cache_len : cache_len + n_pending] = torch.ones(n_pending, n_pending, dtype=torch.bool).tril()
    allowed[n_pending:, cache_len : cache_len + n_pending] = True
    allowed[n_pending : n_pending + n, cache_len + n_pending : cache_len + n_pending + n] = ancestor
    if extra:
        allowed[n_pending + n :, cache_len + n_pending + n :] = extra.allowed
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return TreeInputs(input_ids, positions.unsqueeze(0).to(device), mask[None, None].to(device))


def context_limit(model: PreTrainedModel) -> int:
    return int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)


@torch.inference_mode()
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
    """Decode up to max_new_tokens after prompt_ids with the drafter's proposals, losslessly unless the drafter
    brings its own verifier. Stops after the first stop id (kept in the output), at max_new_tokens, or when the
    model's context is full: the same rule for every method. A prompt that already fills the context (a later
    turn after long answers) yields no tokens and stop_reason "context", for every method alike."""
    if not prompt_ids:
        raise ValueError("empty prompt")
    if max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be > 0, got {max_new_tokens}")
    limit = context_limit(model)
    verify = verify or drafter.verifier or verify_lossless
    device = model.device
    dtype = model.dtype
    synchronize(device)
    started = time.perf_counter()
    cache = DynamicCache(config=model.config)
    ctx = DecodeContext(list(prompt_ids), len(prompt_ids), sampling, generator)
    cache_len = 0
    budget = max(0, min(max_new_tokens, limit - len(prompt_ids)))
    result = Generation([], [], [], [], 0.0, "length" if budget == max_new_tokens else "context")
    if budget == 0:
        result.wall_time = time.perf_counter() - started
        return result

    t0 = time.perf_counter()
    drafter.begin(ctx)
    begin_time = time.perf_counter() - t0
    new = result.token_ids
    while len(new) < budget:
        t0 = time.perf_counter()
        remaining = budget - len(new)
        draft = drafter.propose(ctx).limited(remaining - 1) if remaining > 1 else Draft()
        t1 = time.perf_counter()

        pending = ctx.token_ids[cache_len:]
        n_extra = len(draft.extra.tokens) if draft.extra else 0
        inputs = tree_inputs(pending, draft, cache_len, dtype, device)
        out = model(
            input_ids=inputs.input_ids,
            position_ids=inputs.position_ids,
            attention_mask=inputs.attention_mask,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=len(draft) + 1 + n_extra,
            output_hidden_states=bool(drafter.hidden_layers),
        )
        logits = out.logits[0].float()
        extra_logits = None
        if n_extra:
            extra_logits, logits = logits[len(draft) + 1 :], logits[: len(draft) + 1]
        verdict = verify(draft, logits, sampling, generator)
        kept = cache_len + len(pending)
        if draft or n_extra:
            compact_cache(cache, kept, [kept + i for i in verdict.path])
        emitted = ([draft.tokens[i] for i in verdict.path] + [verdict.bonus])[:remaining]
        for j, token in enumerate(emitted):
            if token in stop_ids:
                emitted = emitted[: j + 1]
                result.stop_reason = "eos"
                break
        hidden = None
        if drafter.hidden_layers:
            rows = list(range(len(pending))) + [len(pending) + i for i in verdict.path]
            hidden = torch.cat([out.hidden_states[i][0][rows] for i in drafter.hidden_layers], dim=-1)
        cache_len = kept + len(verdict.path)
        ctx.token_ids.extend(emitted)
        new.extend(emitted)
        t2 = time.perf_counter()
        if result.stop_reason != "eos":
            drafter.accepted(ctx, StepResult(emitted, verdict.path, hidden, extra_logits))
        t3 = time.perf_counter()
        result.draft_times.append(t1 - t0 + t3 - t2 + begin_time)
        result.verify_times.append(t2 - t1)
        result.accept_lengths.append(len(emitted))
        result.tree_sizes.append(len(draft))
        end = verdict.path[-1] if verdict.path else ROOT
        result.full_paths.append(bool(draft) and end not in draft.parents)  # the path ended at a leaf
        begin_time = 0.0
        if result.stop_reason == "eos":
            break
    synchronize(device)
    result.wall_time = time.perf_counter() - started
    return result
