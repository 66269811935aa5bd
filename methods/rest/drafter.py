"""The drafter and its build (what the method is, and its options: __init__.py)."""
from __future__ import annotations

from specbench.decode.draft import DecodeContext, Draft, Drafter
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.common.datastore import Datastore, Range, open_datastore
from specbench.methods.rest.tree import speculate


class RestDrafter(Drafter):
    def __init__(self, store: Datastore, max_ngram: int = 16, min_ngram: int = 2, depth: int = 10,
                 max_tokens: int = 16) -> None:
        if not 1 <= min_ngram <= max_ngram or depth < 1 or max_tokens < 1:
            raise SpecbenchError("rest: need 1 <= min_ngram <= max_ngram, depth >= 1, max_tokens >= 1")
        self.store, self.max_ngram, self.min_ngram = store, max_ngram, min_ngram
        self.depth, self.max_tokens = depth, max_tokens

    def propose(self, ctx: DecodeContext) -> Draft:
        text = ctx.token_ids
        for n in range(min(self.max_ngram, len(text)), self.min_ngram - 1, -1):
            match = self.store.find(text[-n:])
            if match.hi > match.lo:
                limit = match.depth + self.depth

                def children(node: Range) -> list[tuple[int, int, Range]]:
                    return self.store.children(node) if node.depth < limit else []

                draft = speculate(match, children, self.max_tokens, 0.0).draft
                if draft.tokens:
                    return draft
        return Draft()


def build(ctx: BuildContext) -> Drafter:
    return RestDrafter(open_datastore(ctx.target.name, ctx.options), max_ngram=ctx.option("max_ngram"),
                       min_ngram=ctx.option("min_ngram"), depth=ctx.option("depth"), max_tokens=ctx.option("max_tokens"))
