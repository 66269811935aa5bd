"""The static candidate trees of the head methods that rank each position's guesses (Medusa, Hydra): paths of child
ranks, ordered so that every prefix of the list is a tree (a path's parent comes first) and nodes that are accepted
more often come earlier; `nodes=N` takes the first N."""
from __future__ import annotations

from typing import Any, Mapping

from specbench.decode.draft import parse_tree
from specbench.errors import SpecbenchError
from specbench.method import Option

RANKED_PATHS: tuple[tuple[int, ...], ...] = (
    (0,), (0, 0), (1,), (0, 0, 0), (0, 1), (2,), (1, 0), (0, 0, 0, 0), (0, 0, 1), (0, 1, 0),
    (3,), (0, 2), (1, 1), (0, 0, 0, 1), (2, 0), (0, 0, 2),
)
DEFAULT_NODES = 10  # sized for a 2-core CPU, where verifying 11 tokens costs ~1.6 forwards of one


def first_paths(nodes: int) -> list[tuple[int, ...]]:
    """The first `nodes` paths, sorted by depth then rank (as parse_tree returns a tree)."""
    if not 1 <= nodes <= len(RANKED_PATHS):
        raise SpecbenchError(f"nodes={nodes}: choose 1 to {len(RANKED_PATHS)} (or give tree=JSON paths)")
    return sorted(RANKED_PATHS[:nodes], key=lambda p: (len(p), p))


# The tree options of the methods that verify a static tree of ranks (medusa, hydra).
OPTIONS = (
    Option("nodes", DEFAULT_NODES, "the first N nodes of the ranked static tree", int, low=1, high=len(RANKED_PATHS)),
    Option("tree", None, "the static tree as JSON paths of ranks (overrides nodes)"),
)


def static_tree(options: Mapping[str, Any]) -> list[tuple[int, ...]]:
    """tree=JSON paths, else the first nodes=N (default 10) of the ranked static tree."""
    return parse_tree(options["tree"]) if options["tree"] is not None else first_paths(options["nodes"])
