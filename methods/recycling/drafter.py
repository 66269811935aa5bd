"""The drafter and its build (what the method is, and its options: __init__.py)."""
from __future__ import annotations

import copy

import torch

from specbench.decode.draft import ROOT, DecodeContext, Draft, Drafter, StepResult, parse_tree
from specbench.errors import SpecbenchError
from specbench.method import BuildContext

# A small template for CPUs (a forward over 16 tokens costs ~1.5 forwards over one here); the paper's GPU template
# has 80 nodes. Ranks decrease with depth: the first candidate is right far more often than the others.
SCOPES = ("run", "generation")
EMPTY = -1  # a matrix cell not yet filled


class RecyclingDrafter(Drafter):
    def __init__(self, vocab_size: int, tree: list[tuple[int, ...]], scope: str = "run") -> None:
        if scope not in SCOPES:
            raise SpecbenchError(f"recycling: scope={scope!r}; valid: {', '.join(SCOPES)}")
        self.tree = tree  # paths of child ranks, sorted by depth (parse_tree): a parent path comes before its children
        self.k = 1 + max(rank for path in tree for rank in path)
        self.matrix = torch.full((vocab_size, self.k), EMPTY, dtype=torch.long)
        self.state_scope = scope

    def begin(self, ctx: DecodeContext) -> None:
        if self.state_scope == "generation":
            self.matrix = torch.full_like(self.matrix, EMPTY)

    def fork(self) -> "RecyclingDrafter":
        """Another row of a batch gets its own copy of the matrix, so rows never see each other's updates."""
        other = copy.copy(self)
        other.matrix = self.matrix.clone()
        return other

    def propose(self, ctx: DecodeContext) -> Draft:
        rows: dict[int, list[int]] = {}  # token -> its matrix row, read once per step
        tokens: list[int] = []
        parents: list[int] = []
        node_of = {(): ROOT}
        for path in self.tree:
            parent = node_of.get(path[:-1])
            if parent is None:  # the parent's candidate was empty
                continue
            parent_token = ctx.token_ids[-1] if parent == ROOT else tokens[parent]
            row = rows.get(parent_token)
            if row is None:
                row = rows[parent_token] = self.matrix[parent_token].tolist()
            candidate = row[path[-1]]
            if candidate == EMPTY:
                continue
            node_of[path] = len(tokens)
            tokens.append(candidate)
            parents.append(parent)
        return Draft(tokens, parents)

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        if step.logits is None:
            return
        root = ctx.token_ids[-len(step.emitted) - 1]  # the last token before this step's output
        scored = [root, *step.draft.tokens]  # the tokens whose next-token logits this forward computed
        k = min(self.k, step.logits.shape[-1])
        top = step.logits[: len(scored)].float().topk(k, dim=-1).indices  # the forward's dtype, widened
        last = {token: i for i, token in enumerate(scored)}  # a token scored at several nodes keeps its last row
        self.matrix[torch.tensor(list(last)), :k] = top[torch.tensor(list(last.values()))].to(self.matrix.device)


def build(ctx: BuildContext) -> Drafter:
    vocab = ctx.target.model.get_output_embeddings().weight.shape[0]
    return RecyclingDrafter(vocab, parse_tree(ctx.option("tree")), ctx.option("scope"))
