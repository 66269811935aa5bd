"""How the engine asks a batch's drafters for their drafts and tells them what was accepted: every row whose
drafter is of one class goes in ONE call (Drafter.propose_batch / accepted_batch), never a loop over rows here.

A batched call's time is split evenly across its rows, so each row's draft_times still sum to the drafting the
batch did. Each row's draft is cut to its own token budget, as it is alone.
"""
from __future__ import annotations

import itertools
import operator
import time
from typing import Callable, Protocol, Sequence

import torch

from specbench.decode.draft import DecodeContext, Draft, Drafter, StepResult


class DraftingRow(Protocol):
    """What these functions read and write of the engine's rows."""

    ctx: DecodeContext
    drafter: Drafter
    pending_draft_time: float  # drafting seconds since the row's last recorded step
    flushing: bool  # finished: only feeds its last tokens, drafts nothing

    @property
    def remaining(self) -> int: ...


def by_class(rows: Sequence[DraftingRow]) -> list[list[int]]:
    """Indices of the rows, grouped by their drafter's class (first appearance order, rows in order)."""
    groups: dict[type, list[int]] = {}
    for b, row in enumerate(rows):
        groups.setdefault(type(row.drafter), []).append(b)
    return list(groups.values())


def propose_all(rows: Sequence[DraftingRow]) -> list[Draft]:
    """Each row's draft, cut so that accepting all of it and the bonus token stays within the row's budget; empty
    for a finishing row and for a row with one token left (its drafter is not asked)."""
    drafts = [Draft() for _ in rows]
    asked = [b for b, row in enumerate(rows) if not row.flushing and row.remaining > 1]
    for group in by_class([rows[b] for b in asked]):
        members = [rows[asked[g]] for g in group]
        t0 = time.perf_counter()
        drafter = members[0].drafter
        if len(members) == 1:
            made = [drafter.propose(members[0].ctx)]
        else:
            made = type(drafter).propose_batch([row.drafter for row in members], [row.ctx for row in members])
        made = [draft.limited(row.remaining - 1) for draft, row in zip(made, members)]
        share = (time.perf_counter() - t0) / len(members)
        for g, row, draft in zip(group, members, made):
            row.pending_draft_time += share
            drafts[asked[g]] = draft
    return drafts


def accept_all(rows: Sequence[DraftingRow], steps: Sequence[StepResult]) -> None:
    """Tell each row's drafter its step (steps[b] is row b's), one call per drafter class."""
    for group in by_class(rows):
        members = [rows[b] for b in group]
        t0 = time.perf_counter()
        type(members[0].drafter).accepted_batch([row.drafter for row in members], [row.ctx for row in members],
                                                [steps[b] for b in group])
        share = (time.perf_counter() - t0) / len(members)
        for row in members:
            row.pending_draft_time += share


def propose_together(owner: type[Drafter], drafters: list[Drafter], ctxs: list[DecodeContext],
                     draft_all: Callable[[list, list[DecodeContext]], list[Draft]],
                     shared: tuple[str, ...] = ()) -> list[Draft]:
    """A propose_batch override's body: draft_all(drafters, ctxs) in inference mode when every drafter's propose is
    owner's own and they share the attributes `shared` (the same objects: heads, tree); otherwise (a subclass with
    a propose of its own, or rows with other heads) row by row."""
    if not alike(drafters, owner, "propose", shared):
        return [drafter.propose(ctx) for drafter, ctx in zip(drafters, ctxs)]
    with torch.inference_mode():
        return draft_all(drafters, ctxs)


def alike(drafters: Sequence[Drafter], owner: type[Drafter], method: str, shared: tuple[str, ...]) -> bool:
    """Whether every drafter runs owner's own `method` (no subclass overrides it) and holds the same objects as the
    first in the attributes `shared`: then a batched call may treat them as one (each check one pass in C)."""
    if any(getattr(kind, method) is not getattr(owner, method) for kind in set(map(type, drafters))):
        return False
    return all(all(map(operator.is_, map(operator.attrgetter(a), drafters), itertools.repeat(getattr(drafters[0], a))))
               for a in shared)
