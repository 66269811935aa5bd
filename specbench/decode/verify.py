"""Lossless verification of a draft tree against the target's logits (rules in DESIGN.md).

logits has one row per tree position: row 0 is the root (the last emitted token, whose logits predict the first
draft level) and row i + 1 is draft node i. A verifier returns the accepted path and the bonus token.

The walks read the target only at the values they decide on, fetched together, so that no candidate waits on the
device: at T=0 the argmax of the rows the walk visits (on a CPU) or of every row of the whole batch at once (on an
accelerator: one argmax, one copy to the host per step); at T>0, for the whole batch in one copy to the host, p(x)
(and q(x) for sampled chains) of every draft node at its parent's row and the uniform draws the walks compare them
with (one per node, drawn before the walk from the row's generator), then one more copy for every row's bonus token,
drawn from a residual built on the device. Only that residual is a vector, and the target's distribution is
processed (temperature, top-k, top-p, softmax) only at the rows a walk can read: the root, the nodes with children,
and the leaf a walk ends on, when it does (RowProbs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, runtime_checkable

import torch

from specbench.decode.draft import Draft
from specbench.decode.sampling import Sampling, target_probs


@dataclass
class Verdict:
    path: list[int]  # accepted draft node indices, root to leaf
    bonus: int  # the target's own token after the path


VerifyFn = Callable[[Draft, torch.Tensor, Sampling, "torch.Generator | None"], Verdict]


@runtime_checkable
class FixedRates(Protocol):
    """A TIMING-ONLY verifier that accepts along a draft's best path at fixed conditional per-position rates
    (synthetic acceptance, specbench.run.synthetic): the engine tells the drafters those rates
    (DecodeContext.synthetic_rates)."""

    rates: tuple[float, ...]


def fixed_rates(verify: VerifyFn) -> tuple[float, ...] | None:
    """The rates of a FixedRates verifier; None for one that asks the target."""
    return tuple(verify.rates) if isinstance(verify, FixedRates) else None


def greedy_walk(draft: Draft, best: Callable[[int], int]) -> Verdict:
    """T=0: follow the child equal to the target's argmax at each row (best(row)); the bonus is the argmax after the
    last accepted node (a node's children come after it: the first child after it carrying the token)."""
    path: list[int] = []
    row = 0
    while True:
        token = best(row)
        nxt = child_with(draft, row - 1, token)
        if nxt is None:
            return Verdict(path, token)
        path.append(nxt)
        row = nxt + 1


def child_with(draft: Draft, node: int, token: int) -> int | None:
    """The first child of `node` (ROOT: the root) carrying `token`, or None; children come after their parent, so
    the search starts past it, in C (list.index) from one node carrying the token to the next."""
    tokens, parents = draft.tokens, draft.parents
    at = node + 1
    while True:
        try:
            at = tokens.index(token, at)
        except ValueError:
            return None
        if parents[at] == node:
            return at
        at += 1


def best_token(logits: torch.Tensor) -> int:
    """The argmax of one row of logits, the first of equal maxima (as torch's). On the CPU through numpy, whose
    vectorised argmax over a 49,152-token row takes 4 us where torch's takes 43 (torch 2.13, one thread); bf16 and
    other dtypes numpy lacks are widened to float32 first, which keeps every value and so the argmax."""
    if logits.device.type != "cpu":
        return int(logits.argmax())
    return int(logits.detach().float().numpy().argmax())


def verify_greedy(draft: Draft, logits: torch.Tensor) -> Verdict:
    """T=0 for one row, the argmax taken at the rows the walk visits only (one per accepted level, plus the
    bonus's): over a 64-node tree's [65, V] logits the whole argmax cost 2 ms a step on a 2-core CPU, the walk's
    rows 0.1 ms."""
    return greedy_walk(draft, lambda row: best_token(logits[row]))


def verify_greedy_batch(drafts: list[Draft], logits: torch.Tensor, starts: list[int], all_rows: bool
                        ) -> list[Verdict]:
    """T=0 for every row of a batch, from the forward's logits [B, columns, V] as they are (row b's root at column
    starts[b], its nodes after it). all_rows (an accelerator's way): ONE argmax over the whole tensor and one copy
    to the host for the batch, no row split or joined; else row by row, at the rows each walk visits."""
    if not all_rows:
        return [verify_greedy(draft, logits[b, start : start + len(draft) + 1])
                for b, (draft, start) in enumerate(zip(drafts, starts))]
    best = logits.argmax(dim=-1).tolist()
    return [greedy_walk(draft, lambda row, b=b, start=start: best[b][start + row])
            for b, (draft, start) in enumerate(zip(drafts, starts))]


@dataclass
class Walk:
    path: list[int]
    end_row: int  # row of the last accepted position (0 = root)
    residual: torch.Tensor  # what the bonus token is drawn from at end_row
    rejected_all: bool  # end_row had children and all were rejected


def residual_after_one_hot(p: torch.Tensor, x: int) -> torch.Tensor:
    """A deterministic candidate x was rejected: x can no longer be drawn; the rest keeps its proportions."""
    p = p.clone()
    p[x] = 0.0
    return _normalised(p, fallback=p)


def residual_after_sampled(p: torch.Tensor, q: torch.Tensor, x: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A candidate x drawn from q was rejected: p <- norm(max(0, p - q)), and x leaves q (drawn without
    replacement, the next sibling comes from q without x)."""
    p = _normalised((p - q).clamp_min(0.0), fallback=p)
    q = q.clone()
    q[x] = 0.0
    return p, _normalised(q, fallback=q)


@dataclass(frozen=True)
class RejectionRules:
    """The residual updates of multi-candidate rejection sampling. Only tests replace them, with broken ones, to
    show that the distribution tests catch each kind of mistake."""

    after_one_hot: Callable[[torch.Tensor, int], torch.Tensor] = residual_after_one_hot
    after_sampled: Callable[[torch.Tensor, torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]] = residual_after_sampled


class Uniforms:
    """The uniform draws a walk compares against, in the order it examines candidates: drawn before the walk, one
    per draft node (no walk examines more), in one call on the generator's device."""

    def __init__(self, values: list[float]) -> None:
        self._values = iter(values)

    def __call__(self) -> float:
        return next(self._values)

    @staticmethod
    def draw(n: int, generator: torch.Generator | None) -> torch.Tensor:
        device = generator.device if generator is not None else None  # a CUDA generator draws on its own device
        return torch.rand(n, generator=generator, device=device)


class RowProbs:
    """The processed target distribution at the rows of one draft's logits that a walk reads: the root and every node
    with children in one call, a leaf when a walk first reads it. Indexed like the whole [n + 1, V] block it stands
    for; a tree of 64 bushy nodes has 33 such rows of 65."""

    def __init__(self, logits: torch.Tensor, sampling: Sampling, draft: Draft) -> None:
        self.logits, self.sampling, self.device = logits, sampling, logits.device
        rows = sorted({parent + 1 for parent in draft.parents} | {0})
        self.index = {row: i for i, row in enumerate(rows)}
        contiguous = rows[-1] + 1 == len(rows)  # a chain's rows are 0..n-1: a view, no copy
        self.probs = target_probs(logits[: len(rows)] if contiguous else logits[rows], sampling)

    def __getitem__(self, row: int) -> torch.Tensor:
        at = self.index.get(row)
        return self.probs[at] if at is not None else target_probs(self.logits[row], self.sampling)

    def at(self, rows: list[int], tokens: torch.Tensor) -> torch.Tensor:
        """p(x) at each (row, token) pair; every row has children."""
        return self.probs[torch.tensor([self.index[row] for row in rows], dtype=torch.long, device=self.device), tokens]


Probs = torch.Tensor | RowProbs  # a whole [n + 1, V] block of processed rows, or the rows a walk reads


def rejection_walk(draft: Draft, probs: Probs, uniforms: Uniforms,
                   rules: RejectionRules = RejectionRules()) -> Walk:
    """T>0 multi-candidate rejection sampling over the tree; probs are the processed target rows. The reference
    walk, on whole vectors (a host read per candidate); the engine takes it only for trees of sampled siblings.

    Deterministic candidates (q None): accept x with p(x); on rejection zero p(x), renormalise, try the next child.
    Sampled candidates (drawn without replacement from q): accept with min(1, p(x)/q'(x)); on rejection
    p <- norm(max(0, p - q')) and q' <- q' without x, renormalised. A chain with q is plain SpS."""
    children = draft.children()
    path: list[int] = []
    row = 0
    while True:
        p = probs[row]
        kids = children[row]
        if not kids:
            return Walk(path, row, p, rejected_all=False)
        q = None if draft.q is None else draft.q[kids[0]].float()
        accepted_child = None
        for child in kids:
            x = draft.tokens[child]
            u = uniforms()
            if q is None:
                if u < float(p[x]):
                    accepted_child = child
                    break
                p = rules.after_one_hot(p, x)
            else:
                px, qx = float(p[x]), float(q[x])
                if qx > 0 and u < min(1.0, px / qx):
                    accepted_child = child
                    break
                p, q = rules.after_sampled(p, q, x)
        if accepted_child is None:
            return Walk(path, row, p, rejected_all=True)
        path.append(accepted_child)
        row = accepted_child + 1


def _normalised(weights: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    total = weights.sum()
    # A zero residual has probability zero in exact arithmetic; keep the previous row rather than divide by 0.
    # Decided on the device: no wait for the host.
    return torch.where(total > 1e-12, weights / total, fallback)


def gathered_values(draft: Draft, probs: Probs) -> list[torch.Tensor]:
    """What gathered_walk reads of one row, on the device: p(x) of every node at its parent's row, then (a sampled
    chain or tree) q(x) of every node."""
    rows = [parent + 1 for parent in draft.parents]
    tokens = torch.tensor(draft.tokens, dtype=torch.long, device=probs.device)
    if isinstance(probs, RowProbs):
        values = [probs.at(rows, tokens).float()]
    else:
        values = [probs[torch.tensor(rows, dtype=torch.long, device=probs.device), tokens].float()]
    if draft.q is not None:
        at = torch.arange(len(draft), device=draft.q.device)
        values.append(draft.q[at, tokens.to(draft.q.device)].float().to(probs.device))
    return values


def gathered_walk(draft: Draft, probs: Probs, p_at: list[float], q_at: list[float] | None,
                  uniforms: Uniforms) -> Walk | None:
    """rejection_walk's decisions, with the same draws in the same order, from the values it compares
    (gathered_values, read on the host). After rejected one-hot siblings x_1..x_k the next one is accepted with
    p(x) / (1 - p(x_1) - ... - p(x_k)), which is what zeroing and renormalising p gives; a token already rejected at
    that row cannot be accepted again. None for a tree of sampled siblings, whose residuals after a rejection need
    the whole of p and q (rejection_walk)."""
    if draft.q is not None and not draft.is_chain():
        return None
    children = draft.children()
    path: list[int] = []
    row = 0
    while True:
        kids = children[row]
        if not kids:
            return Walk(path, row, probs[row], rejected_all=False)
        if q_at is not None:  # a chain: one sampled candidate
            child = kids[0]
            u = uniforms()
            if q_at[child] > 0 and u < min(1.0, p_at[child] / q_at[child]):
                path.append(child)
                row = child + 1
                continue
            residual, _ = residual_after_sampled(probs[row], draft.q[child].float(), draft.tokens[child])
            return Walk(path, row, residual, rejected_all=True)
        mass, rejected, accepted_child = 1.0, [], None
        for child in kids:
            x = draft.tokens[child]
            u = uniforms()
            px = 0.0 if x in rejected else p_at[child]
            if mass > 1e-12 and u * mass < px:
                accepted_child = child
                break
            if x not in rejected:
                rejected.append(x)
                mass -= px
        if accepted_child is None:
            residual = probs[row].clone()
            residual[torch.tensor(rejected, dtype=torch.long, device=probs.device)] = 0.0
            return Walk(path, row, _normalised(residual, fallback=residual), rejected_all=True)
        path.append(accepted_child)
        row = accepted_child + 1


def verify_rejection_batch(drafts: list[Draft], logits: list[torch.Tensor], samplings: list[Sampling],
                           generators: list[torch.Generator | None]) -> list[Verdict]:
    """T>0 for every row of a batch, each row with its own generator: one copy to the host of every row's gathered
    values and draws, host walks, then one copy of every row's bonus token."""
    probs = [RowProbs(rows, sampling, draft) for draft, rows, sampling in zip(drafts, logits, samplings)]
    parts: list[torch.Tensor] = []
    for draft, p, generator in zip(drafts, probs, generators):
        parts += gathered_values(draft, p) + [Uniforms.draw(len(draft), generator).to(p.device)]
    host = torch.cat(parts).tolist()
    walks, at = [], 0
    for draft, p in zip(drafts, probs):
        n = len(draft)
        p_at, q_at = host[at : at + n], host[at + n : at + 2 * n] if draft.q is not None else None
        at += 2 * n if draft.q is not None else n
        uniforms = Uniforms(host[at : at + n])
        at += n
        walk = gathered_walk(draft, p, p_at, q_at, uniforms)
        walks.append(walk if walk is not None else rejection_walk(draft, p, uniforms))
    bonus = [torch.multinomial(walk.residual, 1, generator=generator) for walk, generator in zip(walks, generators)]
    return [Verdict(walk.path, token) for walk, token in zip(walks, torch.cat(bonus).tolist())]


def verify_rejection(
    draft: Draft, logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None
) -> Verdict:
    return verify_rejection_batch([draft], [logits], [sampling], [generator])[0]


def verify_lossless(
    draft: Draft, logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None
) -> Verdict:
    if sampling.greedy:
        return verify_greedy(draft, logits)
    return verify_rejection(draft, logits, sampling, generator)
