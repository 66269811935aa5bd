"""The drafter and its build (what the method is, and its options: __init__.py)."""
from __future__ import annotations

from specbench.decode.draft import DecodeContext, Draft, Drafter
from specbench.method import BuildContext


class VanillaDrafter(Drafter):
    def propose(self, ctx: DecodeContext) -> Draft:
        return Draft()


def build(_: BuildContext) -> Drafter:
    return VanillaDrafter()
