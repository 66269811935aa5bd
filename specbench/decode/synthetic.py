"""Synthetic acceptance (TIMING ONLY): a verifier that accepts a drawn number of the draft's tokens instead of
comparing them with the target, so that every method runs at the same acceptance and a table shows each method's
system cost (drafting, the verification forward, bookkeeping) per emitted token, not the quality of its drafter.

The rule, per step (docs/measuring.md, "Synthetic acceptance"):
- the best path of a draft is its top-ranked chain: from the root, the FIRST child at each level (the drafter's
  own proposal order, which every shipped method ranks best first), down to a leaf;
- position i of that path (i = 1 for the first drafted token) is accepted with probability rates[i - 1] GIVEN that
  positions 1..i-1 were accepted (conditional rates); past the last rate given, the last rate applies again, so one
  rate means the same rate at every position. So the chance that at least i tokens are accepted is
  rates[0] * ... * rates[i - 1], and a path only as deep as the draft can be accepted;
- the step emits the accepted draft tokens (the draft's own tokens, whatever the target thinks of them), then the
  bonus token: the target's own choice after the accepted path by the run's sampling (argmax at T=0, a draw from
  the processed distribution at T>0).

The uniform draws come from the row's generator (the run seeds one per question and turn, the same for every
method, never from the clock): one draw per position of the best path, drawn together before the decision. The
output is not the target's: `check`, the losslessness tests and the fair comparison refuse such runs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from specbench.decode.draft import Draft
from specbench.decode.sampling import Sampling, sample, target_probs
from specbench.decode.verify import Uniforms, Verdict
from specbench.errors import SpecbenchError

LABEL = "TIMING-ONLY"  # how records, tables and listings name a run whose output is not the target's


def best_path(draft: Draft) -> list[int]:
    """The draft's top-ranked chain: the first child of the root, then the first child of that node, to a leaf."""
    children = draft.children()
    path: list[int] = []
    kids = children[0]
    while kids:
        path.append(kids[0])
        kids = children[kids[0] + 1]
    return path


@dataclass(frozen=True)
class SyntheticAcceptance:
    """A VerifyFn (specbench.decode.verify) accepting along the best path at fixed conditional per-position rates."""

    rates: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.rates or any(not (0.0 <= r <= 1.0) or math.isnan(r) for r in self.rates):
            raise SpecbenchError(f"synthetic acceptance rates {list(self.rates)}: need one or more numbers in [0, 1]")

    @staticmethod
    def parse(text: str) -> "SyntheticAcceptance":
        """'0.8,0.6,0.5,0.4' (position 1, 2, ...; the last repeats) or '0.7' (every position)."""
        try:
            rates = tuple(float(part) for part in text.split(",") if part.strip())
        except ValueError:
            raise SpecbenchError(f"--synthetic-acceptance {text!r}: expected comma-separated rates in [0, 1], "
                                 "e.g. 0.8,0.6,0.4") from None
        return SyntheticAcceptance(rates)

    def rate(self, position: int) -> float:
        """The conditional acceptance rate of path position `position` (1 = the first drafted token)."""
        return self.rates[min(position, len(self.rates)) - 1]

    def accepted_count(self, draws: list[float]) -> int:
        """How many leading positions the draws accept: position i passes when draws[i - 1] < rate(i)."""
        for i, u in enumerate(draws):
            if u >= self.rate(i + 1):
                return i
        return len(draws)

    def __call__(self, draft: Draft, logits: torch.Tensor, sampling: Sampling,
                 generator: torch.Generator | None) -> Verdict:
        if generator is None:
            raise ValueError("synthetic acceptance draws from the row's generator: the run seeds one per row")
        best = best_path(draft)
        draws = Uniforms.draw(len(best), generator).tolist() if best else []
        path = best[: self.accepted_count(draws)]
        row = logits[path[-1] + 1 if path else 0]
        bonus = int(row.argmax()) if sampling.greedy else sample(target_probs(row, sampling), generator)
        return Verdict(path, bonus)
