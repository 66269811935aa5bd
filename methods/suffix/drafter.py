"""The drafter and its build (what the method is, and its options: __init__.py)."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

from specbench.decode.draft import DecodeContext, Draft, Drafter, StepResult
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.common.frequency_tree import Speculation, speculate

SCOPES = ("run", "generation")


@dataclass
class Node:
    depth: int
    count: int = 0
    children: dict[int, "Node"] = field(default_factory=dict)


class SuffixTree:
    """Every substring of at most `depth` tokens of the inserted texts is a path from the root; a node counts
    where its path occurred. Texts grow token by token (extend), each from its own start (new_text)."""

    def __init__(self, depth: int) -> None:
        self.depth, self.root = depth, Node(0)
        self._open: list[Node] = []  # the nodes of the current text's suffixes still shorter than depth

    def new_text(self) -> None:
        self._open = []

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            grown = []
            for node in [self.root, *self._open]:
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = Node(node.depth + 1)
                child.count += 1
                if child.depth < self.depth:
                    grown.append(child)
            self._open = grown

    def longest_match(self, text: list[int]) -> tuple[Node | None, int]:
        """The node of the longest suffix of text that has continuations, and its length (0: none)."""
        for length in range(min(self.depth, len(text)), 0, -1):
            node = self.root
            for token in text[-length:]:
                node = node.children.get(token)
                if node is None:
                    break
            if node is not None and node.children:
                return node, length
        return None, 0


def counted_children(node: Node) -> list[tuple[int, int, Node]]:
    return [(token, child.count, child) for token, child in node.children.items()]


class SuffixDrafter(Drafter):
    def __init__(self, depth: int = 24, factor: float = 1.0, min_prob: float = 0.1, max_tokens: int = 16,
                 scope: str = "run") -> None:
        if scope not in SCOPES:
            raise SpecbenchError(f"suffix: scope={scope!r}; valid: {', '.join(SCOPES)}")
        if depth < 1 or factor <= 0 or max_tokens < 1 or not 0 <= min_prob <= 1:
            raise SpecbenchError("suffix: depth and max_tokens must be >= 1, factor > 0, 0 <= min_prob <= 1")
        self.depth, self.factor, self.min_prob, self.max_tokens = depth, factor, min_prob, max_tokens
        self.state_scope = scope
        self.global_tree = SuffixTree(depth)
        self.local = SuffixTree(depth)
        self._previous: DecodeContext | None = None  # the last generation, whose output enters the global tree

    def begin(self, ctx: DecodeContext) -> None:
        if self.state_scope == "generation":
            self.global_tree = SuffixTree(self.depth)
        elif self._previous is not None:
            self.global_tree.new_text()
            self.global_tree.extend(self._previous.token_ids[self._previous.prompt_len:])
        self._previous = ctx
        self.local = SuffixTree(self.depth)
        self.local.extend(ctx.token_ids)

    def fork(self) -> "SuffixDrafter":
        """Another row of a batch: its own copy of the global tree, so rows never see each other's outputs."""
        other = copy.copy(self)
        other.global_tree = copy.deepcopy(self.global_tree)
        other._previous = None
        return other

    def propose(self, ctx: DecodeContext) -> Draft:
        best = Speculation(Draft(), 0.0)
        for tree in (self.local, self.global_tree):
            node, length = tree.longest_match(ctx.token_ids)
            if node is None:
                continue
            budget = min(self.max_tokens, max(1, int(self.factor * length)))
            option = speculate(node, counted_children, budget, self.min_prob)
            if option.expected > best.expected:
                best = option
        return best.draft

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        self.local.extend(step.emitted)


def build(ctx: BuildContext) -> Drafter:
    return SuffixDrafter(depth=ctx.option("depth"), factor=ctx.option("factor"), min_prob=ctx.option("min_prob"),
                         max_tokens=ctx.option("max_tokens"), scope=ctx.option("scope"))
