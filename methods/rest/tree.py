"""REST's draft tree: grown best first over a tree of counted continuations. A path's probability is the product,
along it, of each child's count over the sum of its siblings' counts (the empirical next-token distribution of
whatever text the counts come from)."""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Callable, TypeVar

from specbench.decode.draft import ROOT, Draft

N = TypeVar("N")


@dataclass(frozen=True)
class Speculation:
    draft: Draft
    expected: float  # sum of the nodes' path probabilities: the expected number of accepted tokens


def speculate(start: N, children: Callable[[N], list[tuple[int, int, N]]], budget: int,
              min_prob: float) -> Speculation:
    """The most probable paths under `start` first, until `budget` nodes; paths below min_prob are left out.
    children(node) lists (token, count, child node)."""
    tokens: list[int] = []
    parents: list[int] = []
    expected = 0.0
    frontier: list[tuple[float, int, int, int, N]] = []  # (-probability, tie, parent index, token, node)
    order = itertools.count()  # equal probabilities: the first pushed first

    def push(node: N, index: int, prob: float) -> None:
        options = children(node)
        total = sum(count for _, count, _ in options)
        for token, count, child in options:
            if prob * count / total >= min_prob:
                heapq.heappush(frontier, (-prob * count / total, next(order), index, token, child))

    push(start, ROOT, 1.0)
    while frontier and len(tokens) < budget:
        negative, _, parent, token, node = heapq.heappop(frontier)
        tokens.append(token)
        parents.append(parent)
        expected -= negative
        push(node, len(tokens) - 1, -negative)
    return Speculation(Draft(tokens, parents), expected)
