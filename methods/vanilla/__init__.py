"""Vanilla autoregressive decoding: proposes nothing, so every step emits the target's own token (τ = 1).

The drafter: drafter.py."""
from __future__ import annotations

from specbench.method import MethodInfo, Ref

METHODS = [MethodInfo("vanilla", "autoregressive decoding, one target forward per token (the baseline)", True, Ref.to("specbench.methods.vanilla.drafter:build"))]
