"""Hydra (Ankner et al. 2024, "Hydra: Sequentially-Dependent Draft Heads for Medusa Decoding"): Medusa's draft
heads made sequentially dependent. Head k reads the target's last hidden state and the embeddings of the token just
emitted and of the k tokens drafted before it, so each candidate depends on its prefix (Medusa's do not). Drafting
walks a static tree of ranks level by level: one batched head call per depth over the nodes that have children.

Hydra++'s recipe where it fits: teacher distillation (trained on the target's distribution, `train hydra`'s default).
Its 4-block MLP heads are `--opt layers=4`; the default is one block, as Medusa's here (four 4-block heads would be
26 MB on this target, beyond what the wheel can carry). Not implemented: Hydra++'s prefix-attention layer over the
context (it would need a cache of the drafter's own). Verification is the engine's lossless rule.
"""
from __future__ import annotations

from specbench.method import MethodInfo, Ref
from specbench.methods.common.options import HEAD, STATIC_TREE_OPTIONS

BUILD = "specbench.methods.hydra.drafter:build"  # imported (with torch) when a drafter is built

TUNING = ("", "nodes=4", "nodes=6", "nodes=16")  # Medusa's: the two compare at the same verification cost


METHODS = [
    MethodInfo("hydra", "Hydra (Ankner et al. 2024): sequentially dependent draft heads (4, each reading the hidden "
               "state and the drafted prefix's embeddings; teacher-distilled), Medusa's 10-node tree (nodes=N)", True, Ref.to(BUILD),
               TUNING, (HEAD, *STATIC_TREE_OPTIONS)),
]

TRAINERS = {"hydra": Ref.to("specbench.methods.hydra.training:train")}
