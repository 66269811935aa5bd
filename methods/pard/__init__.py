"""PARD (An et al. 2025, "PARD: Accelerating LLM Inference with Low-Cost PARallel Draft Model Adaptation"): sps's
draft LM trained with mask tokens proposes its chain of K tokens in ONE forward, verified by rejection sampling with
its distributions q (lossless)."""
from __future__ import annotations

from specbench.decode.draft import Drafter
from specbench.decode.runtime import prepare_drafter
from specbench.method import BuildContext, MethodInfo, Option
from specbench.methods.common.draft_model import draft_chain
from specbench.methods.common.random_drafter import RANDOM_FROM, random_draft_model, wants_random
from specbench.methods.common.shipped import HEAD, trained_folder
from specbench.methods.pard.drafter import PardDrafter
from specbench.methods.pard.training import load_pard, mask_token, train

__all__ = ["METHODS", "PardDrafter", "TRAINERS"]


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
    model, draft_vocab, mask = load_pard(folder, ctx.target.model)
    prepare_drafter(model, ctx.target.runtime)
    drafter = PardDrafter(model, gamma, vocab, mask, draft_vocab, draft_chain(model, ctx.target.runner, draft_vocab))
    drafter.trained_from = str(folder)
    return drafter


METHODS = [MethodInfo("pard", "PARD: sps's draft LM trained with mask tokens proposes gamma=4 tokens in one forward "
                       "(train pard; --draft FOLDER)", True, build, ("", "gamma=2", "gamma=3", "gamma=6"),
                      (HEAD, Option("gamma", 4, "tokens drafted per step (K: one forward of the context and K-1 "
                                    "mask tokens)", int, low=1)))]

TRAINERS = {"pard": train}
