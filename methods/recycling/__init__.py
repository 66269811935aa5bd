"""Token Recycling (Luo et al. 2024, "Turning Trash into Treasure: Accelerating Inference of Large Language Models
with Token Recycling"): no draft model and no training.

drafter.py: the drafter and its build; this file declares the method (names, options, tuning) without
importing torch, so that the registry lists it at once."""
from __future__ import annotations

from specbench.method import MethodInfo, Option, Ref

DEFAULT_TREE = ("[[0],[1],[2],[0,0],[0,1],[1,0],[2,0],[0,0,0],[0,0,1],[0,1,0],[1,0,0],[0,0,0,0],[0,0,0,1],"
                "[0,0,0,0,0],[0,0,0,0,0,0]]")

OPTIONS = (
    Option("tree", DEFAULT_TREE, "the static tree, as JSON paths of ranks ([[0],[1],[0,0],...])"),
    Option("scope", "run", "the adjacency matrix: kept across questions (as the paper), or cleared every generation",
           choices=("run", "generation")),
)


METHODS = [MethodInfo("recycling", "Token Recycling (Luo et al. 2024): a top-k adjacency matrix of next tokens filled "
                      "from every verification forward, drafted over a static 15-node tree; matrix kept across "
                      "questions (scope=run)", True, Ref.to("specbench.methods.recycling.drafter:build"), options=OPTIONS)]
