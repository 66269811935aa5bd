"""Medusa (Cai et al. 2024): K extra heads on the target's last hidden state; head k guesses the token k+1 places
ahead. Candidates form a static tree of ranks (node [r1, r2, ...] = head 1's r1-th guess, then head 2's r2-th ...),
so drafting costs K small matrix products and no draft model.

Each head is a residual SiLU block h + SiLU(W h + b) (W zero-initialised) followed by the target's frozen lm_head,
shared by all heads, restricted to the most frequent reply tokens. We share it rather than train K copies: a copy of
SmolLM2's 49k x 576 lm_head per head would be 28M parameters each (four heads: 113M, nearly the target's 135M) and
a full-vocabulary product per head per step, which on this CPU costs more than the heads save.

`medusa` verifies with the engine's lossless rule. `medusa-typical` uses Medusa's typical acceptance (accept a
candidate when the target gives it more than min(0.09, 0.3 * exp(-entropy))): faster at T>0 and NOT lossless.
"""
from __future__ import annotations

from specbench.method import MethodInfo, Option, Ref, preset_option
from specbench.methods.common.options import HEAD, STATIC_TREE_OPTIONS

BUILD = "specbench.methods.medusa.drafter:build"  # imported (with torch) when a drafter is built

TUNING = ("", "nodes=4", "nodes=6", "nodes=16")  # Medusa's GPU tree has 63 nodes
# The reference's default (medusa_generate's tree for a model it has no tree of its own for: mc_sim_7b_63).
PAPER = {"paper": "tree=mc_sim_7b_63"}


# Typical acceptance (Medusa's lossy rule): a candidate passes when its target probability exceeds
# min(threshold, alpha * exp(-entropy)).
TYPICAL = (Option("threshold", 0.09, "typical acceptance's probability threshold (epsilon)", float, low=0, high=1),
           Option("alpha", 0.3, "typical acceptance's entropy factor (delta)", float, low=0))

METHODS = [
    MethodInfo("medusa", "Medusa-style heads (4, shared frozen lm_head), 10-node tree (nodes=N), lossless verification",
               True, Ref.to(BUILD, typical=False), TUNING, (HEAD, *STATIC_TREE_OPTIONS, preset_option(PAPER)),
               presets=PAPER),
    MethodInfo("medusa-typical", "Medusa heads with typical acceptance (threshold 0.09, alpha 0.3): LOSSY at T>0",
               False, Ref.to(BUILD, typical=True), TUNING, (HEAD, *STATIC_TREE_OPTIONS, *TYPICAL, preset_option(PAPER)),
               presets=PAPER),
]

TRAINERS = {"medusa": Ref.to("specbench.methods.medusa.training:train")}
