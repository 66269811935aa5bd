"""Vanilla autoregressive decoding: proposes nothing, so every step emits the target's own token (τ = 1).

drafter.py: the drafter and its build; this file declares the method (names, options, tuning) without
importing torch, so that the registry lists it at once."""
from __future__ import annotations

from specbench.method import MethodInfo, Ref

METHODS = [MethodInfo("vanilla", "autoregressive decoding, one target forward per token (the baseline)", True, Ref.to("specbench.methods.vanilla.drafter:build"))]
