"""EAGLE-3 (Li et al. 2025): a draft head over fused low/middle/high target features, trained with the
training-time test, with its own reduced draft vocabulary. Drafts EAGLE-2's dynamic tree (specbench.methods.common.feature_tree)
and is verified by the engine's lossless rule at any temperature.

head.py: the head; checkpoint.py: the official layout both ways; training.py: `specbench train eagle3`.
"""
from __future__ import annotations

from specbench.method import MethodInfo, Ref, preset_option
from specbench.methods.common.options import HEAD, tree_options

BUILD = "specbench.methods.eagle3.drafter:build"  # imported (with torch) when a drafter is built
# The reference's defaults (EaModel.from_pretrained at SafeAILab/EAGLE f2f2366, the EAGLE-3 release, to this day:
# total_token=60 counting the root, depth=7 levels after the first, top_k=10), in this tree's terms.
PAPER = {"paper": "top_k=10:depth=8:total_tokens=59"}


METHODS = [
    MethodInfo("eagle3", "EAGLE-3: fused low/middle/high target features, training-time test, own draft vocabulary; "
               "dynamic tree (top_k=4, depth=6, total_tokens=auto); --draft loads official EAGLE-3 heads", True, Ref.to(BUILD),
               ("", "total_tokens=4", "total_tokens=8", "total_tokens=16"),
               (HEAD, *tree_options(depth=6), preset_option(PAPER)), presets=PAPER),
]
TRAINERS = {"eagle3": Ref.to("specbench.methods.eagle3.training:train")}
