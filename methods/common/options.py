"""The options several methods declare, defined once and torch-free (a method's declaration imports only this and
specbench.method, so the registry lists methods without importing torch): the trained drafter to load, the
dynamic tree of the feature heads (eagle, eagle3), the static tree of ranks (medusa, hydra) and the retrieval
datastore (rest, samd)."""
from __future__ import annotations

from pathlib import Path

from specbench.method import Option

# The option of every trained method: which trained drafter to load (heads side by side in one run).
HEAD = Option("head", None, "folder of the trained drafter to load (default: --draft, else the one shipped for the "
              "target)")

AUTO_MAX_TOKENS = 32  # total_tokens=auto chooses each tree's size up to this


def tree_options(depth: int) -> tuple[Option, ...]:
    """The dynamic tree's options (eagle, eagle3), with the method's default depth."""
    return (
        Option("top_k", 4, "frontier nodes expanded per level, and children drafted per node", int, low=1),
        Option("depth", depth, "draft levels", int, low=1),
        Option("total_tokens", "auto", f"draft nodes verified per step (auto: sized per step, at most "
               f"{AUTO_MAX_TOKENS}, from this machine's measured verification cost)", int, ("auto",), low=1),
    )


# The ranked static tree of the head methods that rank each position's guesses (Medusa, Hydra): paths of child
# ranks, ordered so that every prefix of the list is a tree (a path's parent comes first) and nodes that are
# accepted more often come earlier; `nodes=N` takes the first N.
RANKED_PATHS: tuple[tuple[int, ...], ...] = (
    (0,), (0, 0), (1,), (0, 0, 0), (0, 1), (2,), (1, 0), (0, 0, 0, 0), (0, 0, 1), (0, 1, 0),
    (3,), (0, 2), (1, 1), (0, 0, 0, 1), (2, 0), (0, 0, 2),
)
DEFAULT_NODES = 10  # sized for a 2-core CPU, where verifying 11 tokens costs ~1.6 forwards of one

# The tree options of the methods that verify a static tree of ranks (medusa, hydra).
STATIC_TREE_OPTIONS = (
    Option("nodes", DEFAULT_NODES, "the first N nodes of the ranked static tree", int, low=1, high=len(RANKED_PATHS)),
    Option("tree", None, "the static tree: a name of Medusa's reference trees (mc_sim_7b_63, its default, vicuna_7b_stage2, "
           "...) or JSON paths of ranks (overrides nodes)"),
)

DEFAULT_DATA = Path("../shared/data/train/prompts.jsonl")  # the training prompts a missing datastore is built from

# The options of every method that reads the datastore (rest, samd).
DATASTORE_OPTIONS = (
    Option("datastore", None, "folder of a built retrieval datastore (default: this target's, built on first use)"),
    Option("data", None, f"the training prompts a missing datastore is built from (default: {DEFAULT_DATA})"),
)

# How a draft model's chain length moves (DraftModelDrafter's schedule): gamma every step, or transformers'
# assisted-generation rule (+2 after a step that accepted every drafted token, else -1, at least 1).
DRAFT_SCHEDULES = ("fixed", "heuristic")
