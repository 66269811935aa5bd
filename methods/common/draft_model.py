"""A draft LM drafting a chain of gamma tokens with its own KV cache, verified with its distribution q (rejection
sampling at T>0): sps's small draft model, and swift's layer-skipped view of the target itself. The rows of a batch
draft together, one forward per drafted token for all of them, on the draft's chain (specbench.decode.chain)."""
from __future__ import annotations

import torch
from transformers import PreTrainedModel

from specbench.decode.chain import DraftChain
from specbench.decode.draft import DecodeContext, Draft, Drafter, StepResult
from specbench.decode.drafting import propose_together
from specbench.decode.names import Runtime
from specbench.decode.runner import ModelRunner
from specbench.decode.sampling import sample, target_probs
from specbench.decode.target import load_model
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.common.options import DRAFT_SCHEDULES


def load_draft_lm(name: str, ctx: BuildContext, what: str) -> PreTrainedModel:
    """An HF causal LM as a draft (sps's --draft, AMD's PARD drafts): loaded on stock kernels at its own shapes (it
    then runs on the target's kernels at the target runner's shapes: draft_chain), with the target's tokenizer."""
    draft = load_model(name, ctx.device, ctx.dtype, Runtime(kernels="stock", graphs="off"))
    if draft.tokenizer.get_vocab() != ctx.target.tokenizer.get_vocab():
        raise SpecbenchError(f"{what} {name} has a different tokenizer from the target {ctx.target.name}")
    return draft.model


def draft_chain(model: PreTrainedModel, target: ModelRunner | None, draft_vocab: torch.Tensor | None = None,
                layers: int = 0) -> DraftChain:
    """The draft's chain beside the target's runner (its shape policy; None: a runner of its own). draft_vocab: the
    lm_head rows it drafts over (a reduced vocabulary: the decoder runs, then those rows alone). layers: the cache's
    layer count where the draft's layer indices outrun its config (a layer-skipped view)."""
    body = model if draft_vocab is None else model.get_decoder()
    runner = (target.drafter_runner(body, layers) if target is not None
              else ModelRunner(body, fixed_shapes=False, layers=layers))
    head = None
    if draft_vocab is not None:
        head = model.get_output_embeddings().weight.detach()[draft_vocab.to(model.device)].contiguous()
    return DraftChain.of(runner, head)


class DraftModelDrafter(Drafter):
    def __init__(self, model: PreTrainedModel, gamma: int, vocab_size: int,
                 draft_vocab: torch.Tensor | None = None, chain: DraftChain | None = None,
                 schedule: str = "fixed") -> None:
        """schedule: `fixed` drafts gamma tokens every step; `heuristic` (transformers' assisted generation, which
        Spec-Bench's SpS runs: num_assistant_tokens_schedule="heuristic") starts each generation at gamma and
        drafts 2 more after a step that accepted every drafted token, 1 fewer (at least 1) after one that did not."""
        if gamma < 1:
            raise SpecbenchError(f"gamma must be >= 1, got {gamma}")
        if schedule not in DRAFT_SCHEDULES:
            raise SpecbenchError(f"schedule must be one of {', '.join(DRAFT_SCHEDULES)}, got {schedule!r}")
        self.model, self.gamma, self.vocab_size = model, gamma, vocab_size
        self.first_gamma, self.schedule = gamma, schedule
        # A draft trained on a reduced vocabulary drafts over those rows of its lm_head only (cheap on a CPU);
        # q is then zero elsewhere, which rejection sampling handles exactly.
        self.draft_vocab = None if draft_vocab is None else draft_vocab.to(model.device)
        self.chain = chain or draft_chain(model, None, draft_vocab)
        self.row_caches = (self.chain.runner,)
        self._reset()

    def _reset(self) -> None:
        self.cached = 0  # how many of ctx.token_ids the draft cache holds
        self.proposed = 0  # tokens in the last proposal (a generation ending at EOS leaves it unreported)

    def begin(self, ctx: DecodeContext) -> None:
        self._reset()
        self.gamma = self.first_gamma

    def _logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft logits on the target's vocabulary (the two may pad their embeddings differently; a reduced draft
        vocabulary is -inf off its rows)."""
        if self.draft_vocab is not None:
            full = logits.new_full((logits.shape[0], self.vocab_size), float("-inf"))
            return full.index_copy_(1, self.draft_vocab, logits)
        if logits.shape[-1] >= self.vocab_size:
            return logits[..., : self.vocab_size]
        pad = logits.new_full((*logits.shape[:-1], self.vocab_size - logits.shape[-1]), float("-inf"))
        return torch.cat([logits, pad], dim=-1)

    @torch.inference_mode()
    def propose(self, ctx: DecodeContext) -> Draft:
        return draft_rows([self], [ctx])[0]

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        if not self.proposed:
            return
        # The cache holds the context plus every drafted token but the last; keep the ones the target accepted
        # (the slots past `cached` are masked, then overwritten).
        context_len = self.cached - (self.proposed - 1)
        self.cached = context_len + min(len(step.emitted) - 1, self.proposed - 1)
        self.proposed = 0
        if self.schedule == "heuristic":  # as transformers' update_candidate_strategy: against the uncut gamma
            self.gamma = self.gamma + 2 if len(step.path) == self.gamma else max(1, self.gamma - 1)

    @classmethod
    def propose_batch(cls, drafters: list[Drafter], ctxs: list[DecodeContext]) -> list[Draft]:
        return propose_together(DraftModelDrafter, drafters, ctxs, draft_rows, shared=("chain",))


def draft_rows(drafters: list[DraftModelDrafter], ctxs: list[DecodeContext]) -> list[Draft]:
    """Every row's chain of its gamma tokens: the rows of one gamma together (a heuristic schedule gives rows
    different ones), in the batch's order."""
    drafts: list[Draft | None] = [None] * len(drafters)
    for gamma in sorted({d.gamma for d in drafters}):
        at = [i for i, d in enumerate(drafters) if d.gamma == gamma]
        for i, draft in zip(at, chain_rows([drafters[i] for i in at], [ctxs[i] for i in at])):
            drafts[i] = draft
    return drafts


def chain_rows(drafters: list[DraftModelDrafter], ctxs: list[DecodeContext]) -> list[Draft]:
    """Chains of gamma tokens (the same for every row here) on the drafters' shared chain: one forward per drafted
    token for all rows, one host copy of the picks per forward at T=0 (at T>0 each row draws from its own
    generator)."""
    first = drafters[0]
    rows = [ctx.row for ctx in ctxs]
    feeds = [ctx.token_ids[d.cached :] for d, ctx in zip(drafters, ctxs)]
    tokens: list[list[int]] = [[] for _ in drafters]
    dists: list[list[torch.Tensor]] = [[] for _ in drafters]
    for _ in range(first.gamma):
        logits = first._logits(first.chain.logits(feeds, [d.cached for d in drafters], rows).float())
        for d, feed in zip(drafters, feeds):
            d.cached += len(feed)
        if ctxs[0].sampling.greedy:
            picks = logits.argmax(-1).tolist()
        else:
            q = [target_probs(row, ctx.sampling) for row, ctx in zip(logits, ctxs)]
            picks = [sample(p, ctx.generator) for p, ctx in zip(q, ctxs)]
            for row_dists, p in zip(dists, q):
                row_dists.append(p)
        for row_tokens, token in zip(tokens, picks):
            row_tokens.append(token)
        feeds = [[token] for token in picks]
    for d in drafters:
        d.proposed = first.gamma
    return [Draft.chain(t, torch.stack(q) if q else None) for t, q in zip(tokens, dists)]
