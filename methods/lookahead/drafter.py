"""The drafter and its build (what the method is, its options and how it follows lade: __init__.py)."""
from __future__ import annotations

import random

import torch

from specbench.decode.draft import ROOT, Branch, DecodeContext, Draft, Drafter, StepResult
from specbench.errors import SpecbenchError
from specbench.method import BuildContext


class NgramPool:
    """lade's token map: per key token, at most `size` n-gram continuations, oldest first; a repeat moves to the
    newest end, and a full key drops its oldest."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.grams: dict[int, list[tuple[int, ...]]] = {}

    def insert(self, key: int, gram: tuple[int, ...]) -> None:
        grams = self.grams.setdefault(key, [])
        if gram in grams:
            grams.remove(gram)
        elif len(grams) >= self.size:
            del grams[0]
        grams.append(gram)

    def under(self, key: int) -> list[tuple[int, ...]]:
        return list(self.grams.get(key, ()))


class LookaheadDrafter(Drafter):
    """window[0] holds level 0 without the root (the last emitted token, which is level 0's column 0); window[l]
    (l >= 1) is level l, None until the warm-up fills it. Cell (l, j) sits l + j positions after the root."""

    def __init__(self, ngram: int = 5, window: int = 7, guesses: int = 7, prompt_pool: bool = False,
                 seed: int | None = None) -> None:
        """seed: of the window's first level, drawn from the prompt (None: from the prompt's own tokens, so the same
        prompt starts the same way on every run)."""
        if ngram < 3 or window < 1 or guesses < 1:
            raise SpecbenchError("lookahead needs N >= 3, W >= 1, G >= 1")
        self.n, self.w, self.prompt_pool, self.seed = ngram, window, prompt_pool, seed
        self.pool = NgramPool(guesses)
        self.window: list[list[int] | None] = []
        self.history: list[int] = []
        self.guesses: list[tuple[int, ...]] = []  # the n-grams verified this step, as the pool held them

    def begin(self, ctx: DecodeContext) -> None:
        prompt = list(ctx.token_ids)
        seed = self.seed if self.seed is not None else len(prompt) * 1_000_003 + sum(prompt[-8:])
        rng = random.Random(seed)
        self.window = [[rng.choice(prompt) for _ in range(self.w + self.n - 3)]] + [None] * (self.n - 2)
        self.pool = NgramPool(self.pool.size)
        self.history = prompt
        if self.prompt_pool:
            for s in range(len(prompt) - self.n + 1):
                self.pool.insert(prompt[s], tuple(prompt[s + 1 : s + self.n]))

    @property
    def top(self) -> int:
        """The highest filled level (N - 2 once warmed up)."""
        return max(level for level, cells in enumerate(self.window) if cells is not None)

    def propose(self, ctx: DecodeContext) -> Draft:
        steady = self.top == self.n - 2
        self.guesses = self.pool.under(ctx.token_ids[-1]) if steady else []
        tokens: list[int] = []
        parents: list[int] = []
        children: dict[tuple[int, int], int] = {}  # (parent node, token) -> node: the guesses merged into a trie
        for gram in self.guesses:
            parent = ROOT
            for token in gram[: self.n - 2]:  # lade counts at most N - 2 matches: a guess's last token never emits
                node = children.get((parent, token))
                if node is None:
                    node = children[(parent, token)] = len(tokens)
                    tokens.append(token)
                    parents.append(parent)
                parent = node
        return Draft(tokens, parents, extra=self.branch())

    def branch(self) -> Branch:
        """The window as one branch: level 0's cell j (j >= 1; column 0 is the root) sees level 0's cells up to j;
        cell (l, j) of a higher level sees level 0's columns up to j and its own column's cells below it."""
        cells = [(0, j + 1) for j in range(len(self.window[0]))]
        cells += [(level, j) for level in range(1, self.top + 1) for j in range(len(self.window[level]))]
        allowed = torch.zeros(len(cells), len(cells), dtype=torch.bool)
        for a, (level, col) in enumerate(cells):
            for b, (other, j) in enumerate(cells):
                allowed[a, b] = (other == 0 and j <= col) if level == 0 else \
                    (other == 0 and j <= col) or (j == col and 1 <= other <= level)
        tokens = [t for cells_of in self.window[: self.top + 1] for t in cells_of]
        return Branch(tokens, [level + col for level, col in cells], allowed)

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        if step.extra_logits is None:
            return
        top = self.top
        predicted = step.extra_logits.float().argmax(-1).tolist()[-len(self.window[top]):]  # the top level's outputs
        w = self.window
        if top == 0:  # the prefill
            self.window = [w[0][1:], predicted] + w[2:]
        elif top < self.n - 2:  # warm-up: one level more
            self.window = [cells[1:] for cells in w[: top + 1]] + [predicted[1:]] + w[top + 2:]
        else:
            root = ctx.token_ids[-len(step.emitted) - 1]  # the step's root (its cell in level 0's column 0)
            for col, key in enumerate([root, *w[0]]):
                self.pool.insert(key, tuple(w[level][col] for level in range(1, top + 1)) + (predicted[col],))
            self.window = [w[1][1:], *w[2:], predicted]  # always one column on, whatever was accepted (lade)
        self.remember(step.emitted[-1], len(step.path) + 1)

    def remember(self, last: int, times: int) -> None:
        """lade's history of generated tokens, as it keeps it: the step's last token `times` times (not the step's
        tokens); with prompt_pool every n-gram ending there goes into the pool."""
        if not self.prompt_pool:
            return
        for _ in range(times):
            self.history.append(last)
            if len(self.history) >= self.n:  # a prompt shorter than an n-gram has none to add yet (as lade)
                self.pool.insert(self.history[-self.n], tuple(self.history[-self.n + 1 :]))


def build(ctx: BuildContext) -> Drafter:
    return LookaheadDrafter(ctx.option("N"), ctx.option("W"), ctx.option("G"), bool(ctx.option("prompt_pool")))
