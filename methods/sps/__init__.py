"""Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): a small LM with the target's tokenizer drafts a
chain of gamma tokens, verified by rejection sampling with its distribution q."""
from __future__ import annotations

from specbench.method import MethodInfo, Option, Ref
from specbench.methods.common.options import HEAD

BUILD = "specbench.methods.sps.drafter:build"  # imported (with torch) when a drafter is built


METHODS = [MethodInfo("sps", "speculative sampling: a small draft LM proposes gamma=4 tokens (--draft, or the "
                       "2-layer draft trained here for the default target)", True, Ref.to(BUILD),
                      ("", "gamma=1", "gamma=2", "gamma=3"),
                      (HEAD, Option("gamma", 4, "tokens drafted per step (a chain)", int, low=1)))]

TRAINERS = {"sps-draft": Ref.to("specbench.methods.sps.training:train")}
