"""Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): a small LM with the target's tokenizer drafts a
chain of gamma tokens, verified by rejection sampling with its distribution q."""
from __future__ import annotations

from specbench.method import MethodInfo, Option, Ref, preset_option
from specbench.methods.common.options import DRAFT_SCHEDULES, HEAD

BUILD = "specbench.methods.sps.drafter:build"  # imported (with torch) when a drafter is built
# Spec-Bench's SpS (evaluation/inference_sps.py) is transformers' assisted generation at its defaults:
# num_assistant_tokens=5 on the "heuristic" schedule (tests/test_conformance.py holds it to that trace).
PAPER = {"paper": "gamma=5:schedule=heuristic"}


METHODS = [MethodInfo("sps", "speculative sampling: a small draft LM proposes gamma=4 tokens (--draft, or the "
                       "2-layer draft trained here for the default target)", True, Ref.to(BUILD),
                      ("", "gamma=1", "gamma=2", "gamma=3"),
                      (HEAD, Option("gamma", 4, "tokens drafted per step (a chain; heuristic: the first step's)", int,
                                    low=1),
                       Option("schedule", "fixed", "draft length per step: fixed (gamma every step, the papers' "
                              "rule) or heuristic (transformers' assisted generation, as Spec-Bench runs SpS: +2 "
                              "after a step that accepted all, else -1, at least 1)", str,
                              choices=DRAFT_SCHEDULES),
                       preset_option(PAPER)), presets=PAPER)]

TRAINERS = {"sps-draft": Ref.to("specbench.methods.sps.training:train")}
