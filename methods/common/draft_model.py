"""A draft LM drafting a chain of gamma tokens with its own KV cache, verified with its distribution q (rejection
sampling at T>0): sps's small draft model, and swift's layer-skipped view of the target itself.

On the growing-cache runtimes each row drafts alone with a cache of its own. On the static runtime (`chain`:
specbench.decode.chain) the rows of a batch draft together, one forward per drafted token for all of them, on the
draft's static cache (captured on CUDA)."""
from __future__ import annotations

import torch
from transformers import PreTrainedModel

from specbench.decode.chain import StaticChain
from specbench.decode.draft import DecodeContext, Draft, Drafter, StepResult
from specbench.decode.drafting import propose_together
from specbench.decode.kv import new_cache, truncate_cache
from specbench.decode.sampling import sample, target_probs
from specbench.decode.target import LoadedModel
from specbench.errors import SpecbenchError


def static_chain(model: PreTrainedModel, target: LoadedModel, layers: int = 0) -> StaticChain | None:
    """The draft's static chain where the target runs on the static runtime (None elsewhere). layers: the cache's
    layer count where the draft's layer indices outrun its config (a layer-skipped view)."""
    return StaticChain.of(model, target.static, layers) if target.static is not None else None


class DraftModelDrafter(Drafter):
    def __init__(self, model: PreTrainedModel, gamma: int, vocab_size: int,
                 draft_vocab: torch.Tensor | None = None, chain: StaticChain | None = None) -> None:
        if gamma < 1:
            raise SpecbenchError(f"gamma must be >= 1, got {gamma}")
        self.model, self.gamma, self.vocab_size, self.chain = model, gamma, vocab_size, chain
        # A draft trained on a reduced vocabulary drafts over those rows of its lm_head only (cheap on a CPU);
        # q is then zero elsewhere, which rejection sampling handles exactly.
        self.draft_vocab = None if draft_vocab is None else draft_vocab.to(model.device)
        self.draft_head = None
        if draft_vocab is not None:
            weight = model.get_output_embeddings().weight.detach()
            self.draft_head = weight[self.draft_vocab].contiguous()
        self._reset()

    def _reset(self) -> None:
        self.cache = new_cache() if self.chain is None else None  # a chain keeps its rows in its own static cache
        self.cached = 0  # how many of ctx.token_ids the draft cache holds
        self.proposed = 0  # tokens in the last proposal (a generation ending at EOS leaves it unreported)

    def begin(self, ctx: DecodeContext) -> None:
        self._reset()

    def _forward(self, feed: list[int]) -> torch.Tensor:
        """Draft logits over the target's vocabulary for the token after `feed`."""
        ids = torch.tensor([feed], device=self.model.device)
        if self.draft_head is None:
            out = self.model(input_ids=ids, cache=self.cache, use_cache=True, logits_to_keep=1)
            return self._logits(out.logits[0, -1].float())
        hidden = self.model.get_decoder()(input_ids=ids, cache=self.cache, use_cache=True)
        reduced = (hidden.last_hidden_state[0, -1] @ self.draft_head.T).float()
        return torch.full((self.vocab_size,), float("-inf"), device=reduced.device).index_put_((self.draft_vocab,), reduced)

    def _logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft logits on the target's vocabulary (the two may pad their embeddings differently)."""
        if logits.shape[-1] >= self.vocab_size:
            return logits[..., : self.vocab_size]
        pad = logits.new_full((*logits.shape[:-1], self.vocab_size - logits.shape[-1]), float("-inf"))
        return torch.cat([logits, pad], dim=-1)

    @torch.inference_mode()
    def propose(self, ctx: DecodeContext) -> Draft:
        if self.chain is not None:
            return draft_rows([self], [ctx])[0]
        feed = ctx.token_ids[self.cached :]
        tokens: list[int] = []
        dists: list[torch.Tensor] = []
        for _ in range(self.gamma):
            logits = self._forward(feed)
            self.cached += len(feed)
            if ctx.sampling.greedy:
                token = int(logits.argmax())
            else:
                q = target_probs(logits, ctx.sampling)
                token = sample(q, ctx.generator)
                dists.append(q)
            tokens.append(token)
            feed = [token]
        self.proposed = len(tokens)
        return Draft.chain(tokens, torch.stack(dists) if dists else None)

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        if not self.proposed:
            return
        # The cache holds the context plus every drafted token but the last; keep the ones the target accepted.
        context_len = self.cached - (self.proposed - 1)
        self.cached = context_len + min(len(step.emitted) - 1, self.proposed - 1)
        if self.chain is None:  # a static chain's slots past `cached` are masked, then overwritten
            truncate_cache(self.cache, self.cached)
        self.proposed = 0

    @classmethod
    def propose_batch(cls, drafters: list[Drafter], ctxs: list[DecodeContext]) -> list[Draft]:
        if all(d.chain is not None for d in drafters):
            return propose_together(DraftModelDrafter, drafters, ctxs, draft_rows, shared=("chain",))
        return super().propose_batch(drafters, ctxs)


def draft_rows(drafters: list[DraftModelDrafter], ctxs: list[DecodeContext]) -> list[Draft]:
    """Every row's chain of gamma tokens on the drafters' shared static chain: one forward per drafted token for
    all rows, one host copy of the picks per forward at T=0 (at T>0 each row draws from its own generator)."""
    first = drafters[0]
    for d, fresh in zip(drafters, first.chain.arrange([id(d) for d in drafters])):
        if fresh:  # no row of its own in the chain yet (or no longer): its whole context is fed again
            d.cached = 0
    feeds = [ctx.token_ids[d.cached :] for d, ctx in zip(drafters, ctxs)]
    tokens: list[list[int]] = [[] for _ in drafters]
    dists: list[list[torch.Tensor]] = [[] for _ in drafters]
    for _ in range(first.gamma):
        logits = first.chain.logits(feeds, [d.cached for d in drafters]).float()
        if first.draft_vocab is not None:  # a reduced-vocabulary draft: q is zero off its rows
            logits = torch.full_like(logits, float("-inf")).index_copy_(1, first.draft_vocab,
                                                                        logits[:, first.draft_vocab])
        logits = first._logits(logits)
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
