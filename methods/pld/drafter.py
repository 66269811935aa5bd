"""The drafter and its build (what the method is, and its options: __init__.py)."""
from __future__ import annotations

import torch

from specbench.decode.draft import DecodeContext, Draft, Drafter
from specbench.method import BuildContext


class PromptLookupDrafter(Drafter):
    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, num_tokens: int = 10) -> None:
        self.max_ngram, self.min_ngram, self.num_tokens = max_ngram, min_ngram, num_tokens

    def propose(self, ctx: DecodeContext) -> Draft:
        ids = torch.tensor(ctx.token_ids)
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if len(ids) <= n:
                continue
            # Windows of the text without its last token, so every match has at least one token after it.
            windows = ids[:-1].unfold(0, n, 1)
            matches = (windows == ids[-n:]).all(dim=1).nonzero()
            if len(matches):
                start = int(matches[0]) + n  # the earliest match, as the original PLD
                return Draft.chain(ids[start : start + self.num_tokens].tolist())
        return Draft()


def build(ctx: BuildContext) -> Drafter:
    return PromptLookupDrafter(max_ngram=ctx.option("max_ngram"), min_ngram=ctx.option("min_ngram"),
                               num_tokens=ctx.option("num_tokens"))
