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
from specbench.decode.sampling import Sampling, target_probs
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
        return self.verdict(draft, logits, sampling, generator, all_rows=logits.device.type != "cpu")

    def verdict(self, draft: Draft, logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None,
                all_rows: bool) -> Verdict:
        """all_rows (an accelerator's way): the draws and a bonus candidate at every row of the best path (the
        target's choice there), in one copy to the host; else (a CPU) the draws, then the bonus at the one row
        the path ends on."""
        if generator is None:
            raise ValueError("synthetic acceptance draws from the row's generator: the run seeds one per row")
        best = best_path(draft)
        rows = [0] + [i + 1 for i in best]
        draws = Uniforms.draw(len(best), generator)
        if not all_rows:
            path = best[: self.accepted_count(draws.tolist())]
            return Verdict(path, choice(logits[rows[len(path)]][None], sampling, generator)[0])
        candidates = choice(logits[rows], sampling, generator, on_host=False)
        host = torch.cat([draws.to(logits.device), candidates.float()]).tolist()  # ids below 2**24: exact
        path = best[: self.accepted_count(host[: len(best)])]
        return Verdict(path, int(host[len(best) + len(path)]))


def choice(rows: torch.Tensor, sampling: Sampling, generator: torch.Generator | None, on_host: bool = True):
    """The target's own token at each of the rows [n, V] by the run's sampling: the argmax at T=0, else a draw
    from the processed distribution (the same processing as vanilla's); a list on the host, or a tensor."""
    if sampling.greedy:
        picked = rows.argmax(dim=-1)
    else:
        picked = torch.multinomial(target_probs(rows, sampling), 1, generator=generator)[:, 0]
    return picked.tolist() if on_host else picked
