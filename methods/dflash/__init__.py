"""DFlash (Chen, Liang and Liu 2026, "DFlash: Block Diffusion for Flash Speculative Decoding"): a small draft at the
target's width, conditioned on several target layers' states injected as keys and values, fills a block of mask
positions in ONE non-causal forward; the block's chain is verified by the engine's lossless rule at any temperature.

model.py: the draft; drafter.py: drafting a batch's blocks in one forward; training.py: `specbench train dflash`.
"""
from __future__ import annotations

from specbench.method import MethodInfo, Option, Ref
from specbench.methods.common.options import HEAD

BUILD = "specbench.methods.dflash.drafter:build"  # imported (with torch) when a drafter is built


METHODS = [MethodInfo("dflash", "DFlash: a block of mask positions filled in one non-causal forward of a small draft "
                      "reading the target's low/middle/high layers as keys and values (train dflash; --draft FOLDER)",
                      True, Ref.to(BUILD), ("", "block=4", "block=6", "block=12"),
                      (HEAD, Option("block", 0, "tokens per block: the last emitted token and block-1 masks, "
                                    "block-1 tokens drafted a step (0: the size the draft was trained for)", int,
                                    low=0)))]

TRAINERS = {"dflash": Ref.to("specbench.methods.dflash.training:train")}
