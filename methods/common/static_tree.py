"""The static candidate trees of the head methods that rank each position's guesses (Medusa, Hydra): the first N paths
of the ranked tree (methods/common/options.py, with the options that choose them), the paths given, or a tree of
Medusa's reference by name (medusa_trees.json, written from its medusa_choices.py by
scripts/conformance/medusa_trees.py: mc_sim_7b_63, the reference's default, and the others it ships)."""
from __future__ import annotations

import json
from importlib import resources
from typing import Any, Mapping

from specbench.decode.draft import parse_tree
from specbench.errors import SpecbenchError
from specbench.methods.common.options import RANKED_PATHS, STATIC_TREE_OPTIONS

OPTIONS = STATIC_TREE_OPTIONS  # the tree options of medusa and hydra

def first_paths(nodes: int) -> list[tuple[int, ...]]:
    """The first `nodes` paths, sorted by depth then rank (as parse_tree returns a tree)."""
    if not 1 <= nodes <= len(RANKED_PATHS):
        raise SpecbenchError(f"nodes={nodes}: choose 1 to {len(RANKED_PATHS)} (or give tree=JSON paths)")
    return sorted(RANKED_PATHS[:nodes], key=lambda p: (len(p), p))


def named_trees() -> dict[str, list[list[int]]]:
    """Medusa's reference trees by name."""
    return json.loads(resources.files("specbench.methods.common").joinpath("medusa_trees.json").read_text())["trees"]


def static_tree(options: Mapping[str, Any]) -> list[tuple[int, ...]]:
    """tree=NAME (one of Medusa's reference trees) or JSON paths, else the first nodes=N (default 10) of the ranked
    static tree."""
    tree = options["tree"]
    if tree is None:
        return first_paths(options["nodes"])
    if not tree.lstrip().startswith("["):
        named = named_trees()
        if tree not in named:
            raise SpecbenchError(f"tree={tree}: not one of Medusa's trees ({', '.join(named)}) nor JSON paths")
        return parse_tree(json.dumps(named[tree]))
    return parse_tree(tree)
