"""SuffixDecoding's suffix tree and speculation, rule for rule as the authors' code (arctic-inference's
csrc/suffix_decoding/suffix_tree.cc; held to it by tests/test_conformance.py):

- the tree holds every suffix, at most `depth` tokens long, of each text it is given; a node counts the suffixes
  that pass through it or end at it (so its children's counts may sum to less than its own);
- a node's children are kept in order of decreasing count; a child whose count grows moves up past the siblings it
  now outnumbers, as the reference's sibling list moves it (to the end of the run of its new count, or to its front
  when it was first of its old run);
- speculation tries every match length from 1 up to the longest the tree holds (the text's last `depth` tokens, less
  one) and keeps the draft of the highest score, the longer match on a tie; a match of length L may draft
  int(factor * L) tokens (at most max_tokens); the draft grows best first by path probability (a child's count over
  its parent's), paths below min_prob left out, and its score is the sum of its nodes' probabilities;
- the arithmetic is in float32 and the best-first queue is C++'s std::priority_queue (libstdc++'s heap algorithms),
  so equal probabilities are taken in the reference's order.

The reference compresses chains of nodes into one; here every token is a node, and a node is "inside a chain"
(where the reference would still be inside one of its nodes) when it has one child, of its own count."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specbench.decode.draft import ROOT

f32 = np.float32


@dataclass(eq=False)
class Node:
    token: int
    depth: int
    count: int = 0
    children: list["Node"] = field(default_factory=list)  # by decreasing count (the reference's sibling order)
    by_token: dict[int, "Node"] = field(default_factory=dict)

    def inside_chain(self) -> bool:
        return len(self.children) == 1 and self.children[0].count == self.count


def grow(parent: Node, child: Node) -> None:
    """child.count += 1, moved up its siblings as the reference's _increment_count moves it."""
    siblings = parent.children
    i = siblings.index(child)
    if i > 0 and siblings[i - 1].count <= child.count + 1:
        run = siblings[i - 1].count
        j = i - 1
        while j > 0 and siblings[j - 1].count == run:
            j -= 1
        siblings.pop(i)
        siblings.insert(j, child)
    child.count += 1


class SuffixTree:
    """Every suffix of at most `depth` tokens of the texts given; texts grow token by token (extend), each from its
    own start (new_text)."""

    def __init__(self, depth: int) -> None:
        self.depth, self.root = depth, Node(-1, 0)
        self._open: list[Node] = []  # where the current text's suffixes shorter than depth end

    def new_text(self) -> None:
        self._open = []

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            grown = []
            for node in [*self._open, self.root]:
                child = node.by_token.get(token)
                if child is None:
                    child = node.by_token[token] = Node(token, node.depth + 1, 1)
                    node.children.append(child)
                elif node is self.root:
                    child.count += 1  # the root's order is never read (a match is at least one token)
                else:
                    grow(node, child)
                if child.depth < self.depth:
                    grown.append(child)
            self._open = grown

    def match(self, tokens: list[int]) -> Node | None:
        node = self.root
        for token in tokens:
            node = node.by_token.get(token)
            if node is None:
                return None
        return node


@dataclass
class Speculation:
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    score: np.float32 = f32(0.0)


class CppPriorityQueue:
    """std::priority_queue<Item> with `a.prob < b.prob` as libstdc++ runs it (push_heap, pop_heap), so that items of
    equal probability come out in the reference's order."""

    def __init__(self) -> None:
        self.items: list[tuple] = []

    def __bool__(self) -> bool:
        return bool(self.items)

    def _sift_up(self, hole: int, top: int, value: tuple) -> None:
        v = self.items
        parent = (hole - 1) // 2
        while hole > top and v[parent][0] < value[0]:
            v[hole] = v[parent]
            hole = parent
            parent = (hole - 1) // 2
        v[hole] = value

    def push(self, item: tuple) -> None:
        self.items.append(item)
        self._sift_up(len(self.items) - 1, 0, item)

    def pop(self) -> tuple:
        v = self.items
        top = v[0]
        if len(v) > 1:
            value, v[-1] = v[-1], top
            n, hole, second = len(v) - 1, 0, 0
            while second < (n - 1) // 2:
                second = 2 * (second + 1)
                if v[second][0] < v[second - 1][0]:
                    second -= 1
                v[hole] = v[second]
                hole = second
            if n % 2 == 0 and second == (n - 2) // 2:
                second = 2 * (second + 1)
                v[hole] = v[second - 1]
                hole = second - 1
            self._sift_up(hole, 0, value)
        v.pop()
        return top


def speculate_tree(match: Node, budget: int, min_prob: float) -> Speculation:
    """The reference's _speculate_tree from a matched node. Items: (prob, node, emit, parent): emit the node's token,
    or (emit False) offer the node's children."""
    out, queue, floor = Speculation(), CppPriorityQueue(), f32(min_prob)
    first = (match.children[0], True) if match.inside_chain() else (match, False)
    queue.push((f32(1.0), *first, ROOT))
    while len(out.tokens) < budget and queue:
        prob, node, emit, parent = queue.pop()
        if emit:
            out.tokens.append(node.token)
            out.parents.append(parent)
            out.score = f32(out.score + prob)
            at = len(out.tokens) - 1
            queue.push((prob, node.children[0], True, at) if node.inside_chain() else (prob, node, False, at))
            continue
        for child in node.children:
            p = f32(f32(prob * f32(child.count)) / f32(node.count))
            if p < floor:
                break
            queue.push((p, child, True, parent))
    return out


def speculate(tree: SuffixTree, context: list[int], max_tokens: int, factor: float, min_prob: float) -> Speculation:
    """The reference's SuffixTree::speculate over the context's last `depth` tokens."""
    context = context[-tree.depth:]
    best = Speculation()
    for length in range(1, len(context)):
        node = tree.match(context[-length:])
        if node is None:
            break
        budget = max(min(max_tokens, int(float(f32(length) * f32(factor)) + 1e-6)), 0)
        draft = speculate_tree(node, budget, min_prob)
        if draft.score >= best.score:
            best = draft
    return best
