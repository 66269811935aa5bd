"""The drafter and its build (what the method is, and its options: __init__.py)."""
from __future__ import annotations

import torch

from specbench.decode.draft import DecodeContext, Draft, Drafter
from specbench.method import BuildContext

RULES = ("saxena", "hf")


def lookup(ids: torch.Tensor, n: int, num_tokens: int, rule: str) -> list[int] | None:
    """What followed the earliest earlier occurrence of the last n tokens of `ids`, or None.

    saxena (the reference, find_candidate_pred_tokens): only a FULL continuation of num_tokens tokens that ends
    within the text, from a match that ends before the last n-gram begins; hf (transformers'
    PromptLookupCandidateGenerator): the earliest match that is not the last n-gram itself, its continuation cut
    at the end of the text."""
    length = len(ids)
    if length < n:
        return None
    starts = (ids.unfold(0, n, 1) == ids[-n:]).all(dim=1).nonzero()[:, 0] + n  # where each match's continuation begins
    if rule == "saxena":
        starts = starts[(starts + num_tokens <= length) & (starts < length - n)]
    else:
        starts = starts[starts < length]
    if not len(starts):
        return None
    start = int(starts[0])
    return ids[start : start + num_tokens].tolist()


class PromptLookupDrafter(Drafter):
    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, num_tokens: int = 10, rule: str = "saxena") -> None:
        if rule not in RULES:
            raise ValueError(f"rule must be one of {', '.join(RULES)}, not {rule!r}")
        self.max_ngram, self.min_ngram, self.num_tokens, self.rule = max_ngram, min_ngram, num_tokens, rule

    def propose(self, ctx: DecodeContext) -> Draft:
        ids = torch.tensor(ctx.token_ids)
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            found = lookup(ids, n, self.num_tokens, self.rule)
            if found:
                return Draft.chain(found)
        return Draft()


def build(ctx: BuildContext) -> Drafter:
    return PromptLookupDrafter(max_ngram=ctx.option("max_ngram"), min_ngram=ctx.option("min_ngram"),
                               num_tokens=ctx.option("num_tokens"), rule=ctx.option("rule"))
