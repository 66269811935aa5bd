"""Hydra (Ankner et al. 2024, "Hydra: Sequentially-Dependent Draft Heads for Medusa Decoding"): Medusa's draft
heads made sequentially dependent. Head k reads a context vector and the embeddings of the token just emitted and
of the k tokens drafted before it, so each candidate depends on its prefix (Medusa's do not). Drafting walks a
static tree of ranks level by level: one batched head call per depth over the nodes that have children.

The published heads load as the reference (zankner/Hydra) runs them, by the checkpoint's `hydra_head_arch`:
Hydra++ (`prefix-mlp`: the context vector from a one-layer prefix attention over the target's hidden states, 4-block
heads, each head its own lm_head with bias) and plain `mlp` heads (the context vector is the target's last hidden
state); tests/test_conformance.py holds both to the reference's trees and accepts step by step. The reference's
default tree is `tree=mc_sim_7b_63` (preset=paper). The heads trained here (`train hydra`) are a variant: `mlp`
heads that share the target's frozen lm_head over a draft vocabulary (own lm_heads of SmolLM2's 49k vocabulary
would be 28M parameters a head), taught by teacher distillation (Hydra++'s objective); `--opt layers=4` gives
Hydra++'s head depth, and `train hydra --opt arch=prefix-mlp` trains Hydra++ itself. Verification is the engine's
lossless rule.
"""
from __future__ import annotations

from specbench.method import MethodInfo, Ref, preset_option
from specbench.methods.common.options import HEAD, STATIC_TREE_OPTIONS

BUILD = "specbench.methods.hydra.drafter:build"  # imported (with torch) when a drafter is built

TUNING = ("", "nodes=4", "nodes=6", "nodes=16")  # Medusa's: the two compare at the same verification cost
PAPER = {"paper": "tree=mc_sim_7b_63"}  # hydra_generate's default tree (hydra_choices.py, Medusa's list)


METHODS = [
    MethodInfo("hydra", "Hydra (Ankner et al. 2024): sequentially dependent draft heads (published Hydra++ "
               "prefix-mlp and mlp heads load; shipped: 4 mlp heads on the shared frozen lm_head, teacher-distilled), "
               "10-node tree (nodes=N)", True, Ref.to(BUILD), TUNING, (HEAD, *STATIC_TREE_OPTIONS, preset_option(PAPER)), presets=PAPER),
]

TRAINERS = {"hydra": Ref.to("specbench.methods.hydra.training:train")}
