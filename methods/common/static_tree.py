"""The static candidate trees of the head methods that rank each position's guesses (Medusa, Hydra): the first N paths
of the ranked tree (methods/common/options.py, with the options that choose them), or the paths given."""
from __future__ import annotations

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


def static_tree(options: Mapping[str, Any]) -> list[tuple[int, ...]]:
    """tree=JSON paths, else the first nodes=N (default 10) of the ranked static tree."""
    return parse_tree(options["tree"]) if options["tree"] is not None else first_paths(options["nodes"])
