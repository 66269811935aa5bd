"""The one decode loop. Every method, vanilla included, runs through `generate_batch` (`generate` is its one-row
case), a loop over `decode_step`.

Each step (`decode_step`): each row's drafter proposes a tree; ONE target forward scores, for every row, the tokens
not yet in its cache (the last emitted token, plus the whole prompt on the first step) followed by its tree, under a
4D mask in which each tree node sees its row's context and its ancestors; verification picks each row's accepted
path and bonus token; the KV cache keeps each row's accepted path only. The bonus token is not yet in the cache: it is the
root of the next step.

Rows advance by different lengths: in the cache (specbench.decode.kv) slot s of a row holds its position s, and
each row's block is written from its own context length on (`input_pos`, passed with the forward), left-padded to
the step's shape (its pad tokens written past its real ones); after verification each row's accepted tree nodes
move down to follow its context. A finished row leaves the batch at once (its cache row is filled by a live row's,
in the target's cache and in every drafter's, Drafter.row_caches: the engine owns the map from batch rows to cache
rows, DecodeContext.row), or, with `feed_last`, after one more forward over its last tokens, so that a drafter
reading hidden states gets those of every token (distillation records them).
The target's runner (specbench.decode.runner) decides the forward's shape: its own, or a bucketed one replayed
from a CUDA graph on CUDA; the loop is the same.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import numpy as np
import torch
from transformers import PreTrainedModel

from specbench.decode.draft import ROOT, DecodeContext, Draft, Drafter, StepResult
from specbench.decode.drafting import accept_all, propose_all
from specbench.decode.inputs import row_blocks, target_forward, to_device
from specbench.decode.kv import SlotCache
from specbench.decode.runner import ModelRunner, keep_rows
from specbench.decode.runtime import synchronize
from specbench.decode.sampling import Sampling
from specbench.decode.verify import (
    Verdict,
    VerifyFn,
    fixed_rates,
    verify_greedy_batch,
    verify_lossless,
    verify_rejection_batch,
)

T = TypeVar("T")


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
    # Per step: seconds from the batch's start to the end of its verification (its tokens' time; never read to decide)
    step_ends: list[float] = field(default_factory=list)


def context_limit(model: PreTrainedModel) -> int:
    return int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)


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
    pending_draft_time: float = 0.0  # drafting time since the last step was recorded (begin() counts in the first)
    flushing: bool = False  # finished: this step only feeds its last tokens (feed_last)

    def drafting(self, work: Callable[[], T]) -> T:
        """Run the drafter's work, counting its time as drafting."""
        t0 = time.perf_counter()
        value = work()
        self.pending_draft_time += time.perf_counter() - t0
        return value

    @property
    def remaining(self) -> int:
        return self.budget - len(self.result.token_ids)

    @property
    def live(self) -> bool:
        return self.result.stop_reason != "eos" and self.remaining > 0


def generate(
    model: PreTrainedModel,
    prompt_ids: list[int],
    drafter: Drafter,
    sampling: Sampling,
    max_new_tokens: int,
    stop_ids: set[int],
    generator: torch.Generator | None = None,
    verify: VerifyFn | None = None,
    runner: ModelRunner | None = None,
) -> Generation:
    """Decode up to max_new_tokens after prompt_ids with the drafter's proposals (one row of generate_batch)."""
    return generate_batch(model, [prompt_ids], [drafter], sampling, max_new_tokens, stop_ids, [generator], verify,
                          runner=runner)[0]


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
    feed_last: bool = False,
    on_step: Callable[[int], None] | None = None,
    runner: ModelRunner | None = None,
) -> list[Generation]:
    """Decode every prompt at once, row b with drafters[b] (one drafter object per row: drafters keep per-sequence
    state) and generators[b]; losslessly unless the drafters bring their own verifier (the same for every row).
    Each row stops after its first stop id (kept in the output), at max_new_tokens, or when the model's context is
    full: the same rule for every method. A prompt that already fills the context (a later turn after long
    answers) yields no tokens and stop_reason "context", for every method alike. A row's wall_time runs from the
    batch's start to the step that finished it; its verify_times are the batch's (shared) forwards. feed_last: a
    finished row stays for one more forward over its last tokens (not a step of its record) and its drafter is told
    their hidden states with nothing emitted. on_step (a progress display): told after each step how many tokens
    it emitted; it sees nothing the drafters see and decides nothing. runner: the target's forwards and cache, kept
    for the run (specbench.decode.runner; None: a runner of the model's own shapes for this call)."""
    if not prompts or any(not p for p in prompts):
        raise ValueError("empty prompt")
    if len(drafters) != len(prompts) or len({id(d) for d in drafters}) != len(drafters):
        raise ValueError("one distinct drafter per prompt")
    if max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be > 0, got {max_new_tokens}")
    verify = verify or drafters[0].verifier or verify_lossless
    synchronize(model.device)
    started = time.perf_counter()
    rows = start_rows(prompts, drafters, generators or [None] * len(prompts), sampling, max_new_tokens,
                      context_limit(model), fixed_rates(verify))
    active = [row for row in rows if row.budget > 0]
    for b, row in enumerate(active):
        row.ctx.row = b
        row.drafting(lambda: row.drafter.begin(row.ctx))
    runner = runner or ModelRunner(model, fixed_shapes=False)
    # The drafters' row caches, each once (a drafter's forks share theirs).
    row_caches = list({id(cache): cache for drafter in drafters for cache in drafter.row_caches}.values())
    runner.reserve(len(rows), max(map(len, prompts)) + max_new_tokens)
    while active:
        begun, drafted = time.perf_counter(), sum(row.pending_draft_time for row in active)
        steps = decode_step(runner, active, verify, stop_ids)
        order = leave_batch(runner, row_caches, active, feed_last)
        verified = time.perf_counter()  # the step's time but its drafting (counted in the rows' pending_draft_time)
        verify_seconds = verified - begun - (sum(row.pending_draft_time for row in active) - drafted)
        told = [b for b, row in enumerate(active) if row.result.stop_reason != "eos" or feed_last]
        accept_all([active[b] for b in told], [steps[b] for b in told])
        record_step(active, verify_seconds, verified - started, model.device, started, feed_last)
        active = [active[b] for b in order]
        if on_step is not None:
            on_step(sum(len(step.emitted) for step in steps))
    synchronize(model.device)
    for row in rows:
        if row.budget == 0:
            row.result.wall_time = time.perf_counter() - started
    return [row.result for row in rows]


def decode_step(runner: ModelRunner, rows: list[Row], verify: VerifyFn, stop_ids: set[int]) -> list[StepResult]:
    """One speculative decoding step of every row of the batch (gpt-fast's speculative_decode, batched): each
    drafter proposes a tree; ONE target forward scores each row's uncached tokens and tree; the rule verifies each
    row's tree (its accepted path and bonus token); the cache keeps each row's accepted nodes, and each row emits its
    tokens (accept). Returns, per row, what its drafter is told."""
    drafts = propose_all(rows)
    out, pads = forward(runner, rows, drafts)
    scores = [row_logits(out, b, draft) for b, draft in enumerate(drafts)]
    verdicts = verify_rows(verify, rows, drafts, out.logits, [logits for logits, _ in scores])
    hidden = keep_accepted(runner.cache, out, rows, verdicts, pads)
    return [settle(row, draft, verdicts[b], scores[b], hidden[b], stop_ids)
            for b, (row, draft) in enumerate(zip(rows, drafts))]


def leave_batch(runner: ModelRunner, row_caches: list, rows: list[Row], feed_last: bool) -> list[int]:
    """The rows that stay for the next step (live ones, and with feed_last finished ones for their one last
    forward), in their new order: a finished row's place in the target's cache and in every drafter's is filled by
    a live row's (runner.keep_rows), and each moved row is told where it now is (DecodeContext.row)."""
    stays = [b for b, row in enumerate(rows) if row.live or (feed_last and not row.flushing)]
    if len(stays) == len(rows):
        return stays
    order = keep_rows([runner, *row_caches], stays)
    for b, old in enumerate(order):  # where each kept row now is, in every cache (a left row's is gone)
        rows[old].ctx.row = b
    return order


def record_step(rows: list[Row], verify_seconds: float, ended: float, device: torch.device, started: float,
                feed_last: bool) -> None:
    """Each row's step in its record (its drafting since the last step, the batch's verification time and when it
    ended, `ended` seconds after the batch's start at `started`); a row that finished now gets its wall time (and,
    with feed_last, one more forward over its last tokens)."""
    for row in rows:
        if not row.flushing:
            row.result.draft_times.append(row.pending_draft_time)
            row.result.verify_times.append(verify_seconds)
            row.result.step_ends.append(ended)
        row.pending_draft_time = 0.0
    for row in rows:
        if not row.live and not row.flushing:
            synchronize(device)
            row.result.wall_time = time.perf_counter() - started
            row.flushing = feed_last


def start_rows(prompts: list[list[int]], drafters: list[Drafter], generators: list[torch.Generator | None],
               sampling: Sampling, max_new_tokens: int, limit: int, synthetic_rates: tuple[float, ...] | None = None
               ) -> list[Row]:
    """One row per prompt, its budget cut to what the model's context has left (synthetic_rates: a timing-only
    verifier's, DecodeContext.synthetic_rates)."""
    rows = []
    for prompt, drafter, generator in zip(prompts, drafters, generators):
        budget = max(0, min(max_new_tokens, limit - len(prompt)))
        result = Generation([], [], [], [], 0.0, "length" if budget == max_new_tokens else "context")
        ctx = DecodeContext(list(prompt), len(prompt), sampling, generator, synthetic_rates=synthetic_rates)
        rows.append(Row(ctx, drafter, budget, result))
    return rows


def forward(runner: ModelRunner, rows: list[Row], drafts: list[Draft]) -> tuple[Any, list[int]]:
    """ONE target forward over every row's uncached tokens and draft tree, row b's written from slot cache_len[b];
    the logits of each row's last len(draft) + 1 (+ extra branch) positions are kept (of every position of a
    captured shape). Returns the output and each row's left padding."""
    blocks = row_blocks([row.ctx.token_ids[row.cache_len:] for row in rows], drafts, [row.cache_len for row in rows])
    starts = [row.cache_len for row in rows]
    shape = runner.fit(len(starts), max(blocks.lengths), max(starts))
    keep = shape.tokens if shape.captured else max(scored(d) for d in drafts)
    hidden = any(row.drafter.hidden_layers for row in rows)
    return target_forward(runner, blocks, starts, shape, keep, hidden, runner.dtype, runner.device, runner.layout)


def scored(draft: Draft) -> int:
    """Positions whose logits a step needs: the root, each tree node, each node of the extra branch."""
    return len(draft) + 1 + (len(draft.extra.tokens) if draft.extra else 0)


def row_logits(out: Any, b: int, draft: Draft) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Row b's logits at its root and tree nodes [len(draft) + 1, V], and at its extra branch (None without one):
    views of the forward's, in its dtype."""
    keep = out.logits.shape[1]
    logits = out.logits[b, keep - scored(draft):]
    if draft.extra and draft.extra.tokens:
        return logits[: len(draft) + 1], logits[len(draft) + 1 :]
    return logits, None


def verify_rows(verify: VerifyFn, rows: list[Row], drafts: list[Draft], forward_logits: torch.Tensor,
                logits: list[torch.Tensor]) -> list[Verdict]:
    """Every row's verdict, from the forward's logits [B, columns, V] or each row's view of them (row_logits). Under
    the lossless rule the batch goes together: at T=0 (on an accelerator one argmax over the forward's logits and
    one copy to the host for all rows), at T>0 one copy of every row's gathered values and draws, each row drawing
    from its own generator. A drafter's own verifier goes row by row."""
    if verify is verify_lossless and all(row.ctx.sampling.greedy for row in rows):
        starts = [forward_logits.shape[1] - scored(draft) for draft in drafts]
        return verify_greedy_batch(drafts, forward_logits, starts, all_rows=forward_logits.device.type != "cpu")
    if verify is verify_lossless:
        return verify_rejection_batch(drafts, logits, [row.ctx.sampling for row in rows],
                                      [row.ctx.generator for row in rows])
    return [verify(draft, scores, row.ctx.sampling, row.ctx.generator)
            for row, draft, scores in zip(rows, drafts, logits)]


def keep_accepted(cache: SlotCache, out: Any, rows: list[Row], verdicts: list[Verdict], pads: list[int]
                  ) -> list[torch.Tensor | None]:
    """After verification: each row's accepted tree nodes move down in the cache to follow its pending tokens
    (written from its context length on), and each row's drafter gets the hidden states it asked for
    (Drafter.hidden_layers, concatenated) at the positions the step adds to its cache, in order (None for a row
    that asks for none). Made for every row at once: the indices of both go to the device in ONE copy; one gather
    for every row's hidden states (the rows' drafters read the same layers: one class per batch), one for every
    row's and layer's moves, and one split of the rows' states into their views."""
    layers = next((row.drafter.hidden_layers for row in rows if row.drafter.hidden_layers), ())
    if any(row.drafter.hidden_layers not in ((), layers) for row in rows):
        raise ValueError("the drafters of one batch must read the same hidden states")
    width = out.hidden_states[0].shape[1] if layers else 0  # the forward's columns
    longest = max(len(verdict.path) for verdict in verdicts)
    # By row, each padded to the longest path (slot 0 onto itself): the slots the accepted nodes move from, and to.
    sources: list[int] = []
    targets: list[int] = []
    columns: list[int] = []  # by row: the output columns of the positions the step adds to its cache, flattened
    counts: list[int] = []
    for b, (row, verdict, pad) in enumerate(zip(rows, verdicts, pads)):
        n_pending = len(row.ctx.token_ids) - row.cache_len
        base = row.cache_len + n_pending  # the slot of the tree's first node, and of the first accepted one after
        if longest:
            sources += [base + node for node in verdict.path] + [0] * (longest - len(verdict.path))
            targets += [*range(base, base + len(verdict.path))] + [0] * (longest - len(verdict.path))
        if layers:
            first = b * width + pad
            columns += [*range(first, first + n_pending), *(first + n_pending + node for node in verdict.path)]
            counts.append(n_pending + len(verdict.path))
    moving = sources != targets and cache.keys is not None
    if not layers and not moving:
        return [None] * len(rows)
    moves = sources + targets if moving else []
    staged = to_device(np.array(moves + columns, dtype=np.int64), out.logits.device)  # columns: empty without layers
    if moving:
        cache.move_slots(*staged[: len(moves)].view(2, len(rows), longest))
    if not layers:
        return [None] * len(rows)
    states = (torch.cat([out.hidden_states[i][: len(rows)] for i in layers], dim=-1) if len(layers) > 1
              else out.hidden_states[layers[0]][: len(rows)]).flatten(0, 1)
    picked = states.index_select(0, staged[len(moves) :]).split(counts)
    return [hidden if row.drafter.hidden_layers else None for row, hidden in zip(rows, picked)]


def settle(row: Row, draft: Draft, verdict: Verdict, scores: tuple[torch.Tensor, torch.Tensor | None],
           hidden: torch.Tensor | None, stop_ids: set[int]) -> StepResult:
    """Emit the row's tokens for its verdict and record the step. Returns what its drafter is told (with `hidden`,
    the hidden states at the positions the step added to its cache)."""
    logits, extra_logits = scores
    n_pending = len(row.ctx.token_ids) - row.cache_len
    row.cache_len += n_pending + len(verdict.path)
    if row.flushing:  # a finished row's last forward (feed_last): its draft is empty, nothing is emitted
        return StepResult([], [], hidden, draft=draft)
    emitted, stopped = emitted_tokens(draft, verdict, row.remaining, stop_ids)
    if stopped:
        row.result.stop_reason = "eos"
    row.ctx.token_ids.extend(emitted)
    row.result.token_ids.extend(emitted)
    row.result.accept_lengths.append(len(emitted))
    row.result.tree_sizes.append(len(draft))
    end = verdict.path[-1] if verdict.path else ROOT
    row.result.full_paths.append(bool(draft) and end not in draft.parents)  # the path ended at a leaf
    return StepResult(emitted, verdict.path, hidden, extra_logits, draft, logits)
