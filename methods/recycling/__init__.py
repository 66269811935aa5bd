"""Token Recycling (Luo et al. 2024, "Turning Trash into Treasure: Accelerating Inference of Large Language Models
with Token Recycling"): no draft model and no training.

An adjacency matrix holds, for every token t, the k tokens the target ranked highest right after t the last time it
scored a position holding t. Each verification forward scores the root and every draft node, and so refreshes the
rows of all those tokens with the top-k of their logits ("recycling" the candidates that verification discards).
A draft is the matrix expanded breadth-first over a static tree template rooted at the last emitted token: the
node at template path (r1, .., rd) is candidate r_d of its parent's token.

State: the paper keeps the matrix across queries (scope=run, the default here; records say drafter_state "run");
scope=generation clears it at the start of every turn. The candidates are deterministic, so the engine verifies
them losslessly at any temperature (one-hot candidates).

The drafter: drafter.py."""
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
