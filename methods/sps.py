"""Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): a small LM with the target's tokenizer drafts a
chain of gamma tokens, verified by rejection sampling with its distribution q."""
from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel

from specbench.draft import DecodeContext, Draft, Drafter
from specbench.errors import SpecbenchError
from specbench.kv import truncate_cache
from specbench.registry import BuildContext, MethodInfo
from specbench.sampling import sample, target_probs
from specbench.target import load_model


class DraftModelDrafter(Drafter):
    def __init__(self, model: PreTrainedModel, gamma: int, vocab_size: int) -> None:
        if gamma < 1:
            raise SpecbenchError(f"sps gamma must be >= 1, got {gamma}")
        self.model, self.gamma, self.vocab_size = model, gamma, vocab_size
        self._reset()

    def _reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.cached = 0  # how many of ctx.token_ids the draft cache holds
        self.proposed = 0  # tokens in the last proposal (a generation ending at EOS leaves it unreported)

    def begin(self, ctx: DecodeContext) -> None:
        self._reset()

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
            out = self.model(
                input_ids=torch.tensor([feed], device=self.model.device),
                past_key_values=self.cache,
                use_cache=True,
                logits_to_keep=1,
            )
            self.cached += len(feed)
            logits = self._logits(out.logits[0, -1].float())
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

    def accepted(self, ctx: DecodeContext, n_new: int) -> None:
        if not self.proposed:
            return
        # The cache holds the context plus every drafted token but the last; keep the ones the target accepted.
        context_len = self.cached - (self.proposed - 1)
        self.cached = context_len + min(n_new - 1, self.proposed - 1)
        truncate_cache(self.cache, self.cached)
        self.proposed = 0


def build(ctx: BuildContext) -> Drafter:
    if not ctx.draft:
        raise SpecbenchError("sps needs a draft model: --draft NAME_OR_PATH (an HF causal LM with the target's tokenizer)")
    draft = load_model(ctx.draft, ctx.device, ctx.dtype)
    if draft.tokenizer.get_vocab() != ctx.target.tokenizer.get_vocab():
        raise SpecbenchError(f"--draft {ctx.draft} has a different tokenizer from the target {ctx.target.name}")
    vocab = ctx.target.model.get_output_embeddings().weight.shape[0]
    return DraftModelDrafter(draft.model, ctx.option("gamma", 4), vocab)


METHODS = [MethodInfo("sps", "speculative sampling: a small draft LM (--draft) proposes gamma=4 tokens", True, build)]
