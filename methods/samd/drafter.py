"""The drafter and its build (what the method is, and its options: __init__.py)."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace

from specbench.decode.draft import DecodeContext, Draft, Drafter, StepResult
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.common.datastore import SEPARATOR, Datastore, open_datastore


@dataclass
class SuffixAutomaton:
    """The suffix automaton of a growing token sequence (states: longest length, suffix link, transitions, and the
    end position of the first occurrence)."""
    length: list[int] = field(default_factory=lambda: [0])
    link: list[int] = field(default_factory=lambda: [-1])
    next: list[dict[int, int]] = field(default_factory=lambda: [{}])
    first_end: list[int] = field(default_factory=lambda: [-1])
    last: int = 0
    size: int = 0  # tokens added

    def _state(self, length: int, link: int, transitions: dict[int, int], first_end: int) -> int:
        self.length.append(length)
        self.link.append(link)
        self.next.append(transitions)
        self.first_end.append(first_end)
        return len(self.length) - 1

    def add(self, token: int) -> None:
        cur = self._state(self.length[self.last] + 1, -1, {}, self.size)
        p = self.last
        while p != -1 and token not in self.next[p]:
            self.next[p][token] = cur
            p = self.link[p]
        if p == -1:
            self.link[cur] = 0
        else:
            q = self.next[p][token]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:
                clone = self._state(self.length[p] + 1, self.link[q], dict(self.next[q]), self.first_end[q])
                while p != -1 and self.next[p].get(token) == q:
                    self.next[p][token] = clone
                    p = self.link[p]
                self.link[q] = self.link[cur] = clone
        self.last = cur
        self.size += 1

    def earlier_repeat(self) -> tuple[int, int]:
        """(length, end position of its first occurrence) of the longest suffix that also occurred earlier."""
        state = self.link[self.last]
        return (self.length[state], self.first_end[state]) if state > 0 else (0, -1)


class SamDrafter(Drafter):
    def __init__(self, store: Datastore | None, aux: Drafter, draft_len: int = 8, threshold: int = 3,
                 max_ngram: int = 16) -> None:
        if draft_len < 1 or threshold < 1 or max_ngram < 1:
            raise SpecbenchError("samd: draft_len, threshold and max_ngram must be >= 1")
        self.store, self.aux = store, aux
        self.draft_len, self.threshold, self.max_ngram = draft_len, threshold, max_ngram
        self.hidden_layers, self.state_scope = aux.hidden_layers, aux.state_scope
        self.automaton = SuffixAutomaton()
        self._fed = 0  # tokens of ctx.token_ids in the automaton

    def begin(self, ctx: DecodeContext) -> None:
        self.automaton, self._fed = SuffixAutomaton(), 0
        self._feed(ctx.token_ids)
        self.aux.begin(ctx)

    def fork(self) -> "SamDrafter":
        other = copy.copy(self)
        other.aux = self.aux.fork()
        other.automaton, other._fed = SuffixAutomaton(), 0
        return other

    def _feed(self, tokens: list[int]) -> None:
        for token in tokens[self._fed:]:
            self.automaton.add(token)
        self._fed = len(tokens)

    def _static(self, text: list[int]) -> tuple[int, list[int]]:
        """The longest suffix (up to max_ngram) found in the corpus and its first occurrence's continuation."""
        if self.store is None:
            return 0, []
        for n in range(min(self.max_ngram, len(text)), self.threshold - 1, -1):  # shorter matches are not used
            match = self.store.find(text[-n:])
            if match.hi > match.lo:
                start = int(self.store.suffixes[match.lo:match.hi].min()) + n
                following = self.store.corpus[start : start + self.draft_len].tolist()
                following = following[: following.index(SEPARATOR)] if SEPARATOR in following else following
                return n, following
        return 0, []

    def propose(self, ctx: DecodeContext) -> Draft:
        text = ctx.token_ids
        self._feed(text)
        length, end = self.automaton.earlier_repeat()
        best_len, best = length, text[end + 1 : end + 1 + self.draft_len] if length else []
        static_len, following = self._static(text)
        if static_len > best_len:
            best_len, best = static_len, following
        if best_len >= self.threshold and best:
            return Draft.chain(best)
        return self.aux.propose(ctx)

    def accepted(self, ctx: DecodeContext, step: StepResult) -> None:
        self.aux.accepted(ctx, step)


def build(ctx: BuildContext) -> Drafter:
    name = ctx.option("aux")
    if name not in ctx.methods or name.startswith("samd"):
        raise SpecbenchError(f"samd: aux={name!r} is not a method to fall back on; valid: "
                             f"{', '.join(m for m in ctx.methods if not m.startswith('samd'))}")
    store = open_datastore(ctx.target.name, ctx.options) if ctx.option("static") == "on" else None
    # The auxiliary method with its own defaults; head=FOLDER is its trained drafter (samd-eagle@head=...).
    aux = ctx.methods[name].drafter(replace(ctx, options={"head": ctx.option("head")} if ctx.option("head") else {}))
    drafter = SamDrafter(store, aux, draft_len=ctx.option("draft_len"), threshold=ctx.option("threshold"),
                         max_ngram=ctx.option("max_ngram"))
    drafter.trained_from = aux.trained_from  # samd-eagle's EAGLE head, for the budget table
    return drafter
