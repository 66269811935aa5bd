"""The drafter and its build (what the method is, and its options: __init__.py)."""
from __future__ import annotations

import random
from collections import OrderedDict

import torch

from specbench.decode.draft import ROOT, Branch, DecodeContext, Draft, Drafter, StepResult
from specbench.errors import SpecbenchError
from specbench.method import BuildContext


class LookaheadDrafter(Drafter):

    def __init__(self, ngram: int = 5, window: int = 7, guesses: int = 7) -> None:
        if ngram < 2 or window < 1 or guesses < 0:
            raise SpecbenchError("lookahead needs N >= 2, W >= 1, G >= 0")
        self.n, self.w, self.g = ngram, window, guesses
        self.levels = ngram - 1
        self.branch_shape = self._branch_shape()
        self.window: list[list[int]] = []
        self.pool: dict[int, OrderedDict[tuple[int, ...], None]] = {}

    def _branch_shape(self) -> tuple[list[int], torch.Tensor]:
        """Offsets and the attention pattern of the window, flattened level by level."""
        cells = [(level, col) for level in range(self.levels) for col in range(self.w)]
        index = {cell: k for k, cell in enumerate(cells)}
        allowed = torch.zeros(len(cells), len(cells), dtype=torch.bool)
        for k, (level, col) in enumerate(cells):
            for c in range(col + 1):
                allowed[k, index[(0, c)]] = True
            for lower in range(level + 1):
                allowed[k, index[(lower, col)]] = True
        return [level + col + 1 for level, col in cells], allowed

    def begin(self, ctx: DecodeContext) -> None:
        # A fixed seed per prompt: the window starts from prompt tokens, the same way on every run.
        rng = random.Random(len(ctx.token_ids) * 1_000_003 + sum(ctx.token_ids[-8:]))
        prompt = ctx.token_ids
        self.window = [[rng.choice(prompt) for _ in range(self.w)] for _ in range(self.levels)]
        self.pool = {}

    def propose(self, ctx: DecodeContext) -> Draft:
        tokens: list[int] = []
        parents: list[int] = []
        children: dict[tuple[int, int], int] = {}  # (parent node, token) -> node: the guesses merged into a trie
        for gram in reversed(self.pool.get(ctx.token_ids[-1], {})):  # the newest first
            parent = ROOT
            for token in gram:
                node = children.get((parent, token))
                if node is None:
                    node = len(tokens)
                    tokens.append(token)
                    parents.append(parent)
                    children[(parent, token)] = node
                parent = node
        offsets, allowed = self.branch_shape
        window = [t for level in self.window for t in level]
        return Draft(tokens, parents, extra=Branch(window, offsets, allowed))

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        if step.extra_logits is None:
            return
        out = step.extra_logits.argmax(-1).view(self.levels, self.w).tolist()
        for col in range(self.w):
            gram = [self.window[level][col] for level in range(self.levels)] + [out[-1][col]]
            guesses = self.pool.setdefault(gram[0], OrderedDict())
            guesses.pop(tuple(gram[1:]), None)
            guesses[tuple(gram[1:])] = None
            while len(guesses) > self.g:
                guesses.popitem(last=False)
        # Jacobi step, each cell keeping its position: level l takes the predictions of level l-1 for the same
        # positions, level 0 those of its own left neighbours (its first cell has none and keeps its token).
        self.window = [self.window[0][:1] + out[0][:-1]] + [out[level - 1][:] for level in range(1, self.levels)]


def build(ctx: BuildContext) -> Drafter:
    return LookaheadDrafter(ctx.option("N"), ctx.option("W"), ctx.option("G"))
