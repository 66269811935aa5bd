"""Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): a small LM with the target's tokenizer drafts a
chain of gamma tokens, verified by rejection sampling with its distribution q."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedModel

from specbench.decode.draft import DecodeContext, Draft, Drafter, StepResult
from specbench.decode.kv import new_cache, truncate_cache
from specbench.decode.runtime import prepare_drafter
from specbench.decode.sampling import sample, target_probs
from specbench.decode.target import load_model
from specbench.errors import SpecbenchError
from specbench.methods.common.shipped import shipped_folder
from specbench.methods.sps.draft_model import is_small_draft, load_small_draft
from specbench.methods.sps.training import train
from specbench.run.registry import BuildContext, MethodInfo


class DraftModelDrafter(Drafter):
    def __init__(self, model: PreTrainedModel, gamma: int, vocab_size: int,
                 draft_vocab: torch.Tensor | None = None) -> None:
        if gamma < 1:
            raise SpecbenchError(f"sps gamma must be >= 1, got {gamma}")
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


def build(ctx: BuildContext) -> Drafter:
    vocab = ctx.target.model.get_output_embeddings().weight.shape[0]
    gamma = ctx.option("gamma", 4)
    chosen = ctx.options.get("head") or ctx.draft  # sps@head=FOLDER: drafts side by side in one run
    folder = Path(chosen) if chosen else shipped_folder("sps", ctx.target.name)
    if folder is not None and is_small_draft(folder):
        draft_model, draft_vocab = load_small_draft(folder, ctx.target.model)
        prepare_drafter(draft_model, ctx.target.runtime)
        drafter = DraftModelDrafter(draft_model, gamma, vocab, draft_vocab)
        drafter.trained_from = str(folder)
        return drafter
    if not chosen:
        raise SpecbenchError("sps needs a draft model: --draft NAME_OR_PATH (an HF causal LM with the target's tokenizer)")
    # The draft runs on the target's runtime (stock when the target is stock).
    runtime = ctx.target.runtime.name if ctx.target.runtime and ctx.target.runtime.swapped_linears else "stock"
    draft = load_model(chosen, ctx.device, ctx.dtype, runtime)
    if draft.tokenizer.get_vocab() != ctx.target.tokenizer.get_vocab():
        raise SpecbenchError(f"--draft {chosen} has a different tokenizer from the target {ctx.target.name}")
    drafter = DraftModelDrafter(draft.model, gamma, vocab)
    drafter.trained_from = chosen
    return drafter


METHODS = [MethodInfo("sps", "speculative sampling: a small draft LM proposes gamma=4 tokens (--draft, or the "
                       "2-layer draft trained here for the default target)", True, build,
                      ("", "gamma=1", "gamma=2", "gamma=3"))]

TRAINERS = {"sps-draft": train}
