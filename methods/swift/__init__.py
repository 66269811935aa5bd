"""Layer-skip self-speculation (SWIFT: Xia et al. 2024, "SWIFT: On-the-Fly Self-Speculative Decoding for LLM
Inference Acceleration"; the same idea as Draft & Verify, Zhang et al. 2024): the target drafts for itself with some
of its decoder layers skipped, a chain of gamma tokens verified with the layer-skipped model's distribution q, so it
is lossless at every temperature.

drafter.py: the drafter and its build; this file declares the method (names, options, tuning) without
importing torch, so that the registry lists it at once."""
from __future__ import annotations

from specbench.method import MethodInfo, Option, Ref

OPTIONS = (
    Option("ratio", 0.2, "share of the decoder layers skipped, spread evenly over the middle", float, low=0, high=1),
    Option("skip", None, "the skipped layers, comma-separated indices (overrides ratio)"),
    Option("gamma", 2, "tokens drafted per step (a chain)", int, low=1),
)


METHODS = [MethodInfo("swift", "SWIFT (Xia et al. 2024): the target drafts for itself with 20% of its layers skipped "
                      "(ratio=R or skip=I,J,...), a chain of gamma=2 tokens; training-free", True, Ref.to("specbench.methods.swift.drafter:build"),
                      ("", "ratio=0.1:gamma=2", "ratio=0.2:gamma=1", "ratio=0.3:gamma=3"), OPTIONS)]
