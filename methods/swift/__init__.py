"""Layer-skip self-speculation (SWIFT: Xia et al. 2024, "SWIFT: On-the-Fly Self-Speculative Decoding for LLM
Inference Acceleration"; the same idea as Draft & Verify, Zhang et al. 2024): the target drafts for itself with some
of its decoder layers skipped, a chain of gamma tokens verified with the layer-skipped model's distribution q, so it
is lossless at every temperature.

The draft model is a view of the target (`layer_skip_view`) that shares every weight with it but runs only the kept
decoder layers: a shallow copy of the target and of its decoder, each with its own module registry (the target's is
never touched), the decoder's layer list cut to the kept layers and its config to their layer types. The view runs
with a cache of its own (the drafter's runner), never the target's. Each kept layer keeps its index into that cache,
so the skipped layers' slots stay empty; transformers sizes its masks from the first layer of each attention kind,
which is therefore always kept, as are the last layer and layer 0.

Which layers: skip=I,J,... explicitly, else ratio=R of them spread evenly over the middle (layer 0, the last layer and
the first layer of each attention kind are kept). SWIFT chooses its layer set by an on-the-fly Bayesian search
during decoding; here the layer set is chosen before the run, by the tuning rule on a development split (`tune`),
like every other method's settings: nothing that decides what is drafted reads the clock. Training-free.

The drafter: drafter.py."""
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
