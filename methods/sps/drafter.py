"""SpS's build: the small draft LM (shipped, trained here, or any HF causal LM with the target's tokenizer) as a
chain drafter (methods/common/draft_model.py)."""
from __future__ import annotations

from specbench.decode.draft import Drafter
from specbench.decode.runtime import prepare_drafter
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.common.draft_model import DraftModelDrafter, draft_chain, load_draft_lm
from specbench.methods.common.random_drafter import RANDOM_FROM, random_draft_model, wants_random
from specbench.methods.common.small_draft import is_small_draft, load_small_draft, mask_token_of
from specbench.shipped import shipped_folder

__all__ = ["build"]


def build(ctx: BuildContext) -> Drafter:
    vocab = ctx.target.model.get_output_embeddings().weight.shape[0]
    gamma, schedule = ctx.option("gamma"), ctx.option("schedule")
    chosen = ctx.option("head") or ctx.draft  # sps@head=FOLDER: drafts side by side in one run
    if wants_random(ctx):  # a shape target: a 2-layer random draft of its own architecture and vocabulary
        draft_model = random_draft_model(ctx.target.model, "sps")
        prepare_drafter(draft_model, ctx.target.runtime)
        drafter = DraftModelDrafter(draft_model, gamma, vocab, chain=draft_chain(draft_model, ctx.target.runner),
                                    schedule=schedule)
        drafter.trained_from = RANDOM_FROM
        return drafter
    folder = ctx.chosen_folder() if chosen else shipped_folder("sps", ctx.target.name)
    if folder is not None and mask_token_of(folder) is not None:
        raise SpecbenchError(f"{folder} is a PARD draft (its config names a mask token): it drafts K tokens in one "
                             "forward; run it with --methods pard, not sps")
    if folder is not None and is_small_draft(folder):
        draft_model, draft_vocab = load_small_draft(folder, ctx.target.model)
        prepare_drafter(draft_model, ctx.target.runtime)
        drafter = DraftModelDrafter(draft_model, gamma, vocab, draft_vocab,
                                     draft_chain(draft_model, ctx.target.runner, draft_vocab), schedule)
        drafter.trained_from = str(folder)
        return drafter
    if not chosen:
        raise SpecbenchError("sps needs a draft model: --draft NAME_OR_PATH (an HF causal LM with the target's tokenizer)")
    draft = load_draft_lm(chosen, ctx, "--draft")
    prepare_drafter(draft, ctx.target.runtime)
    drafter = DraftModelDrafter(draft, gamma, vocab, chain=draft_chain(draft, ctx.target.runner), schedule=schedule)
    drafter.trained_from = chosen
    return drafter
