"""DFlash (Chen, Liang and Liu 2026, "DFlash: Block Diffusion for Flash Speculative Decoding"): a small draft at the
target's width, conditioned on several target layers' states injected as keys and values, fills a block of mask
positions in ONE non-causal forward; the block's chain is verified by the engine's lossless rule at any temperature.

model.py: the draft; drafter.py: drafting a batch's blocks in one forward; training.py: `specbench train dflash`.
"""
from __future__ import annotations

from specbench.decode.draft import Drafter
from specbench.decode.runner import ModelRunner
from specbench.decode.runtime import prepare_drafter
from specbench.method import BuildContext, MethodInfo, Option
from specbench.methods.common.random_drafter import RANDOM_FROM, seeded, wants_random
from specbench.methods.common.shipped import HEAD, trained_folder
from specbench.methods.common.target_layers import fused_layers
from specbench.methods.dflash.drafter import DFlashDrafter
from specbench.methods.dflash.model import DFlashDraft, dflash_config
from specbench.methods.dflash.training import load_dflash, train

__all__ = ["METHODS", "DFlashDrafter", "TRAINERS"]

RANDOM_BLOCK = 8  # a shape target's random draft: one layer, blocks of 8 (what `train dflash` trains by default)


def random_draft(target) -> DFlashDraft:
    """A shape target's draft (TIMING ONLY): one layer of the target's shape, random weights seeded by the name."""
    config = dflash_config(target.config, 1, RANDOM_BLOCK, fused_layers(target.config.num_hidden_layers))
    with seeded("dflash", target.device):
        draft = DFlashDraft(config)
    return draft.share(target).to(target.device, target.dtype).eval()


def build(ctx: BuildContext) -> Drafter:
    target = ctx.target.model
    if wants_random(ctx):
        draft, folder = random_draft(target), RANDOM_FROM
    else:
        folder = trained_folder(ctx, "dflash", "DFlash draft", "dflash")
        draft = load_dflash(folder, target)
    prepare_drafter(draft, ctx.target.runtime)
    runner = ctx.target.runner
    runner = runner.drafter_runner(draft) if runner is not None else ModelRunner(draft, fixed_shapes=False)
    drafter = DFlashDrafter(draft, ctx.option("block") or draft.block_size, runner)
    drafter.trained_from = str(folder)
    return drafter


METHODS = [MethodInfo("dflash", "DFlash: a block of mask positions filled in one non-causal forward of a small draft "
                      "reading the target's low/middle/high layers as keys and values (train dflash; --draft FOLDER)",
                      True, build, ("", "block=4", "block=6", "block=12"),
                      (HEAD, Option("block", 0, "tokens per block: the last emitted token and block-1 masks, "
                                    "block-1 tokens drafted a step (0: the size the draft was trained for)", int,
                                    low=0)))]

TRAINERS = {"dflash": train}
