"""PARD's drafter: the draft LM proposes its whole chain of K tokens in ONE forward for every row of a batch. Each row
feeds its uncached context tokens, then K-1 mask tokens, at its own slots of the draft's cache; the logits at its
last K positions give the K draft tokens (position j's logits the token j+1 past the context). Afterwards the row's
cache counts its context only: the mask tokens' slots are overwritten by the next step's feed."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedModel

from specbench.decode.chain import DraftChain
from specbench.decode.draft import DecodeContext, Draft, Drafter, StepResult
from specbench.decode.drafting import propose_together
from specbench.decode.runtime import prepare_drafter
from specbench.decode.sampling import sample, target_probs
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.common.draft_model import DraftModelDrafter, draft_chain, load_draft_lm
from specbench.methods.common.random_drafter import RANDOM_FROM, random_draft_model, wants_random
from specbench.methods.common.shipped import trained_folder
from specbench.methods.common.small_draft import is_small_draft, mask_token_of
from specbench.methods.pard.training import load_pard, mask_token


class PardDrafter(DraftModelDrafter):
    """A DraftModelDrafter (its draft vocabulary, chain and logits on the target's vocabulary) drafting with mask
    tokens: `mask_token` is the id the draft was trained to read as "a token not known yet"."""

    def __init__(self, model: PreTrainedModel, gamma: int, vocab_size: int, mask_token: int,
                 draft_vocab: torch.Tensor | None = None, chain: DraftChain | None = None) -> None:
        super().__init__(model, gamma, vocab_size, draft_vocab, chain)
        self.mask_token = mask_token

    @torch.inference_mode()
    def propose(self, ctx: DecodeContext) -> Draft:
        return pard_rows([self], [ctx])[0]

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        """Nothing to keep: the cache holds the context only, the accepted tokens are fed with the next step's."""

    @classmethod
    def propose_batch(cls, drafters: list[Drafter], ctxs: list[DecodeContext]) -> list[Draft]:
        return propose_together(PardDrafter, drafters, ctxs, pard_rows, shared=("chain",))


def pard_rows(drafters: list[PardDrafter], ctxs: list[DecodeContext]) -> list[Draft]:
    """Every row's chain of K = gamma tokens from one forward of the drafters' shared chain: greedy at T=0; at T>0
    each token drawn from its own processed distribution q (returned for rejection sampling: token j is drawn from
    q_j whatever the tokens before it, so verification with q_j stays exact)."""
    first = drafters[0]
    k = first.gamma
    contexts = [ctx.token_ids[d.cached :] for d, ctx in zip(drafters, ctxs)]
    feeds = [context + [first.mask_token] * (k - 1) for context in contexts]
    raw = first.chain.last_logits(feeds, [d.cached for d in drafters], [ctx.row for ctx in ctxs], k).float()
    logits = first._logits(raw.reshape(-1, raw.shape[-1])).reshape(len(drafters), k, -1)
    for d, context in zip(drafters, contexts):
        d.cached += len(context)  # the mask tokens' slots lie past it, overwritten next step
    if ctxs[0].sampling.greedy:
        return [Draft.chain(row) for row in logits.argmax(-1).tolist()]
    drafts = []
    for row, ctx in zip(logits, ctxs):
        q = torch.stack([target_probs(position, ctx.sampling) for position in row])
        drafts.append(Draft.chain([sample(p, ctx.generator) for p in q], q))
    return drafts


def published_pard(folder: Path, ctx: BuildContext) -> tuple[PreTrainedModel, None, int]:
    """A PARD draft as AMD publishes it: an HF causal LM of the target's tokenizer, config.json naming pard_token (the
    mask id it was trained with; spd_type "pard"). Loaded as sps loads a draft LM: the target's kernels, its own
    shapes."""
    mask = mask_token_of(folder)
    if mask is None:
        raise SpecbenchError(f"{folder} is not a PARD draft: its config.json names no pard_token (nor "
                             "specbench_pard_mask_token); train one with python -m specbench train pard")
    draft = load_draft_lm(str(folder), ctx, "PARD draft")
    if draft.get_output_embeddings().weight.shape[0] != ctx.target.model.get_output_embeddings().weight.shape[0]:
        raise SpecbenchError(f"PARD draft {folder} has another vocabulary size than the target {ctx.target.name}")
    return draft, None, mask


def build(ctx: BuildContext) -> Drafter:
    vocab = ctx.target.model.get_output_embeddings().weight.shape[0]
    gamma = ctx.option("gamma")
    if wants_random(ctx):  # a shape target: a random draft of sps's shape (timing only), as sps builds
        model = random_draft_model(ctx.target.model, "pard")
        prepare_drafter(model, ctx.target.runtime)
        drafter = PardDrafter(model, gamma, vocab, mask_token(vocab, None, ctx.target.stop_ids),
                              chain=draft_chain(model, ctx.target.runner))
        drafter.trained_from = RANDOM_FROM
        return drafter
    folder = trained_folder(ctx, "pard", "PARD draft", "pard")
    if is_small_draft(folder):  # ours: sps's small draft, adapted
        model, draft_vocab, mask = load_pard(folder, ctx.target.model)
    else:  # AMD's published layout (amd/PARD-*): a whole causal LM whose config names its pard_token
        model, draft_vocab, mask = published_pard(folder, ctx)
    prepare_drafter(model, ctx.target.runtime)
    drafter = PardDrafter(model, gamma, vocab, mask, draft_vocab, draft_chain(model, ctx.target.runner, draft_vocab))
    drafter.trained_from = str(folder)
    return drafter
