"""PARD (An et al. 2025, "PARD: Accelerating LLM Inference with Low-Cost PARallel Draft Model Adaptation"): sps's
draft LM trained with mask tokens proposes its chain of K tokens in ONE forward, verified by rejection sampling with
its distributions q (lossless)."""
from __future__ import annotations

from specbench.method import MethodInfo, Option, Ref, preset_option
from specbench.methods.common.options import HEAD

BUILD = "specbench.methods.pard.drafter:build"  # imported (with torch) when a drafter is built
PAPER = {"paper": "gamma=12"}  # draft_k of AMD's pard_infer.py (its default, README and eval configs)


METHODS = [MethodInfo("pard", "PARD: sps's draft LM trained with mask tokens proposes gamma=4 tokens in one forward "
                       "(train pard; --draft FOLDER)", True, Ref.to(BUILD), ("", "gamma=2", "gamma=3", "gamma=6"),
                      (HEAD, Option("gamma", 4, "tokens drafted per step (K: one forward of the context and K-1 "
                                    "mask tokens)", int, low=1), preset_option(PAPER)), presets=PAPER)]

TRAINERS = {"pard": Ref.to("specbench.methods.pard.training:train")}
