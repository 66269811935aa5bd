"""Vanilla autoregressive decoding: proposes nothing, so every step emits the target's own token (τ = 1)."""
from __future__ import annotations

from specbench.decode.draft import DecodeContext, Draft, Drafter
from specbench.method import BuildContext


class VanillaDrafter(Drafter):
    def propose(self, ctx: DecodeContext) -> Draft:
        return Draft()


def build(_: BuildContext) -> Drafter:
    return VanillaDrafter()
