"""The drafter and its build (what the method is, and its options: __init__.py; the tree and its speculation:
tree.py)."""
from __future__ import annotations

import copy

from specbench.decode.draft import DecodeContext, Draft, Drafter, StepResult
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.suffix.tree import SuffixTree, speculate

SCOPES = ("run", "generation")


class SuffixDrafter(Drafter):
    """Two suffix trees, as the reference's SuffixDecodingCache keeps them: the generation's own (its prompt, then
    its output as it grows) and the global one (every output of the run, each as its own text, the current one
    included as it grows). Each step both speculate from the text so far and the higher score drafts (the
    generation's own on a tie)."""

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

    def begin(self, ctx: DecodeContext) -> None:
        if self.state_scope == "generation":
            self.global_tree = SuffixTree(self.depth)
        self.global_tree.new_text()
        self.local = SuffixTree(self.depth)
        self.local.extend(ctx.token_ids)

    def fork(self) -> "SuffixDrafter":
        """Another row of a batch: its own copy of the global tree, so rows never see each other's outputs."""
        other = copy.copy(self)
        other.global_tree = copy.deepcopy(self.global_tree)
        return other

    def propose(self, ctx: DecodeContext) -> Draft:
        if len(ctx.token_ids) == ctx.prompt_len:
            return Draft()  # as the reference is driven (vLLM): the first draft follows the prefill's token
        own, run = (speculate(tree, ctx.token_ids, self.max_tokens, self.factor, self.min_prob)
                    for tree in (self.local, self.global_tree))
        best = own if own.score >= run.score else run
        return Draft(best.tokens, best.parents)

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        self.local.extend(step.emitted)
        self.global_tree.extend(step.emitted)


def build(ctx: BuildContext) -> Drafter:
    return SuffixDrafter(depth=ctx.option("depth"), factor=ctx.option("factor"), min_prob=ctx.option("min_prob"),
                         max_tokens=ctx.option("max_tokens"), scope=ctx.option("scope"))
