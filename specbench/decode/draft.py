"""The Drafter contract: what a method proposes and what it is told back.

A drafter proposes a token tree for the current context; the engine verifies it with the target and then tells the
drafter what was accepted. A drafter never touches the target's KV cache, the verification rule or the stop rule.
"""
from __future__ import annotations

import copy
import itertools
import json
import operator
from dataclasses import dataclass, field
from typing import Callable

import torch

from specbench.decode.sampling import Sampling
from specbench.errors import SpecbenchError

ROOT = -1  # parent index of nodes hanging directly under the last emitted token


@dataclass
class Branch:
    """Extra tokens a drafter wants scored in the same target forward but never verified or kept in the cache
    (Lookahead's Jacobi window). Each sees the whole context, the root, and the branch tokens `allowed` lets it."""

    tokens: list[int]
    offsets: list[int]  # position of each token relative to the root (>= 1)
    allowed: torch.Tensor  # [m, m] bool: which branch tokens each one attends to (itself included)


@dataclass
class Draft:
    """A token tree. Nodes are in topological order: a node's parent comes before it (or is ROOT).

    q[i] is the draft distribution node i was drawn from (at its parent, before removing siblings drawn earlier);
    None when candidates are deterministic (PLD, n-grams, top-k picks), which verification treats as one-hot."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    q: torch.Tensor | None = None
    extra: Branch | None = None

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.parents):
            raise ValueError("a draft needs one parent per token")
        if self.parents and (min(self.parents) < ROOT or not all(map(operator.lt, self.parents, itertools.count()))):
            i, parent = next((i, p) for i, p in enumerate(self.parents) if not ROOT <= p < i)
            raise ValueError(f"draft node {i} has parent {parent}: parents must precede their children")

    @staticmethod
    def chain(tokens: list[int], q: torch.Tensor | None = None) -> "Draft":
        return Draft(list(tokens), list(range(-1, len(tokens) - 1)), q)

    def __len__(self) -> int:
        return len(self.tokens)

    def is_chain(self) -> bool:
        return all(parent == i - 1 for i, parent in enumerate(self.parents))

    def depths(self) -> list[int]:
        """Depth of each node; the root's children have depth 1."""
        depth = [1] * len(self.parents)
        for i, parent in enumerate(self.parents):
            depth[i] = depth[parent] + 1 if parent != ROOT else 1
        return depth

    def children(self) -> list[list[int]]:
        """children[0] lists the root's children, children[i + 1] those of node i, in proposal order."""
        kids: list[list[int]] = [[] for _ in range(len(self.tokens) + 1)]
        for i, parent in enumerate(self.parents):
            kids[parent + 1].append(i)
        return kids

    def limited(self, max_depth: int) -> "Draft":
        """The same tree without nodes deeper than max_depth (no point drafting past the token budget)."""
        if max_depth <= 0:
            return Draft(extra=self.extra)
        if max_depth >= len(self.tokens):  # no node is deeper than the tree's size
            return self
        depth = self.depths()
        if max(depth) <= max_depth:
            return self
        keep = [i for i in range(len(self.tokens)) if depth[i] <= max_depth]
        new_index = {old: new for new, old in enumerate(keep)}
        return Draft(
            tokens=[self.tokens[i] for i in keep],
            parents=[ROOT if self.parents[i] == ROOT else new_index[self.parents[i]] for i in keep],
            q=None if self.q is None else self.q[keep],
            extra=self.extra,
        )


def parse_tree(text: str) -> list[tuple[int, ...]]:
    """A static tree (EAGLE-1, Medusa) as a JSON list of paths of child ranks, e.g. [[0],[1],[0,0]]: node [0,1] is
    the second-ranked candidate under the first-ranked one. Returned sorted by depth, then rank."""
    try:
        paths = [tuple(int(r) for r in p) for p in json.loads(text)]
    except (ValueError, TypeError):
        raise SpecbenchError(f"tree {text!r}: expected a JSON list of lists of ranks, e.g. [[0],[1],[0,0]]") from None
    known = set(paths)
    for p in paths:
        if not p or min(p) < 0 or (len(p) > 1 and p[:-1] not in known):
            raise SpecbenchError(f"tree path {list(p)} is empty, negative, or lacks its parent path")
    return sorted(known, key=lambda p: (len(p), p))


@dataclass
class DecodeContext:
    """What a drafter may see. The engine owns it and updates it after every step."""

    token_ids: list[int]  # prompt + emitted tokens; the last one is not yet in the target's cache
    prompt_len: int
    sampling: Sampling
    generator: torch.Generator | None
    # The batch row this sequence holds, kept by the engine as rows leave: its row in every cache beside the target
    # (a drafter's forward names it, specbench.decode.runner.ModelRunner.cache_rows).
    row: int = 0
    # TIMING ONLY: the conditional per-position rates at which the step's verifier accepts along the draft's best
    # path whatever the target says (synthetic acceptance, verify.FixedRates); a drafter that sizes its tree from its
    # own confidence sizes it from these instead. None: the target verifies.
    synthetic_rates: tuple[float, ...] | None = None


@dataclass
class StepResult:
    """What the engine tells a drafter after a verification step: one typed result for every method."""

    emitted: list[int]  # accepted draft tokens, then the bonus; already appended to ctx.token_ids
    path: list[int]  # the accepted draft nodes' indices in the proposed tree, root to leaf
    # The target hidden states a drafter asked for (Drafter.hidden_layers, concatenated in that order) at the
    # positions this step added to the target's cache, in order; None for drafters that ask for none.
    hidden: torch.Tensor | None = None
    # Logits [m, V] of the draft's extra branch (Lookahead's window), from the same forward (in its dtype: views of
    # the forward's output); None without one.
    extra_logits: torch.Tensor | None = None
    # The tree as verified (the proposal cut to the remaining token budget; `path` indexes it) and the target's
    # logits [len(draft) + 1, V] at its root and at each of its nodes, from the same forward (Token Recycling
    # refills its matrix from them).
    draft: Draft = field(default_factory=Draft)
    logits: torch.Tensor | None = None


class Drafter:
    """Base class of every method. Subclasses override propose and, when they keep state, begin and accepted."""

    # Which of the target's hidden states the drafter reads, as indices into transformers' output_hidden_states
    # (-1: after the final norm, the lm_head input; i: the input of decoder layer i). Empty: none.
    hidden_layers: tuple[int, ...] = ()
    # How long drafter state (caches, n-gram pools) lives; written into every record. begin() resets it for each
    # generation (each turn of each question), so nothing carries over between questions.
    state_scope: str = "generation"
    # A verification rule other than the engine's lossless one (e.g. Medusa typical acceptance); None = lossless.
    verifier: Callable | None = None
    # What it keeps a row of for each batch row, row b for the batch's row b (DecodeContext.row), shared by its forks:
    # caches (specbench.decode.runner.ModelRunner's: a head's, a draft model's) and any store with a
    # `copy_rows(holes, movers)`; the engine moves their rows with the target's when rows leave a batch. Empty: none.
    row_caches: tuple = ()
    # Where the drafter's trained weights came from (a folder or model id), for the report's budget table; None for
    # training-free methods.
    trained_from: str | None = None

    def begin(self, ctx: DecodeContext) -> None:
        """A new sequence starts (ctx.token_ids is the prompt). Reset per-sequence state."""

    def fork(self) -> "Drafter":
        """A drafter for another row of a batch: the same weights and settings, its own per-sequence state. A
        shallow copy suffices because begin() replaces (never mutates) every per-sequence attribute; a drafter
        whose state outlives begin() overrides this."""
        return copy.copy(self)

    def propose(self, ctx: DecodeContext) -> Draft:
        raise NotImplementedError

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        """step.emitted were just appended to ctx.token_ids (accepted draft tokens, then the bonus)."""

    @classmethod
    def propose_batch(cls, drafters: list["Drafter"], ctxs: list[DecodeContext]) -> list[Draft]:
        """The drafts of several rows of a batch (drafters of this class, one per row) in one call. By default row
        by row; a drafter that drafts every row at once overrides it, and must give each row exactly the draft
        propose would give it alone."""
        return [drafter.propose(ctx) for drafter, ctx in zip(drafters, ctxs)]

    @classmethod
    def accepted_batch(cls, drafters: list["Drafter"], ctxs: list[DecodeContext], steps: list[StepResult]) -> None:
        """accepted for several rows in one call; by default row by row."""
        for drafter, ctx, step in zip(drafters, ctxs, steps):
            drafter.accepted(ctx, step)
