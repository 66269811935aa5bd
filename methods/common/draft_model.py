"""A draft LM drafting a chain of gamma tokens with its own KV cache, verified with its distribution q (rejection
sampling at T>0): sps's small draft model, and swift's layer-skipped view of the target itself."""
from __future__ import annotations

import torch
from transformers import PreTrainedModel

from specbench.decode.draft import DecodeContext, Draft, Drafter, StepResult
from specbench.decode.kv import new_cache, truncate_cache
from specbench.decode.sampling import sample, target_probs
from specbench.errors import SpecbenchError


class DraftModelDrafter(Drafter):
    def __init__(self, model: PreTrainedModel, gamma: int, vocab_size: int,
                 draft_vocab: torch.Tensor | None = None) -> None:
        if gamma < 1:
            raise SpecbenchError(f"gamma must be >= 1, got {gamma}")
        self.model, self.gamma, self.vocab_size = model, gamma, vocab_size
        # A draft trained on a reduced vocabulary drafts over those rows of its lm_head only (cheap on a CPU);
        # q is then zero elsewhere, which rejection sampling handles exactly.
        self.draft_vocab = None if draft_vocab is None else draft_vocab.to(model.device)
        self.draft_head = None
        if draft_vocab is not None:
            weight = model.get_output_embeddings().weight.detach()
            self.draft_head = weight[self.draft_vocab].contiguous()
        self._reset()

    def _reset(self) -> None:
        self.cache = new_cache()
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
        pad = logits.new_full((self.vocab_size - logits.shape[-1],), float("-inf"))
        return torch.cat([logits, pad])

    @torch.inference_mode()
    def propose(self, ctx: DecodeContext) -> Draft:
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
        truncate_cache(self.cache, self.cached)
        self.proposed = 0
