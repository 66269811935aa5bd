"""SuffixDecoding (Oliaro et al. 2024, "SuffixDecoding: Extreme Speculative Decoding for Emerging AI Applications";
the method behind vLLM's suffix decoding): no draft model and no training.

drafter.py: the drafter and its build; this file declares the method (names, options, tuning) without
importing torch, so that the registry lists it at once."""
from __future__ import annotations

from specbench.method import MethodInfo, Option, Ref

OPTIONS = (
    Option("depth", 24, "depth of the suffix trees (the longest match used)", int, low=1),
    Option("factor", 1.0, "a speculation tree grows up to factor x the match length", float, low=0),
    Option("min_prob", 0.1, "paths of lower estimated probability are dropped", float, low=0, high=1),
    Option("max_tokens", 16, "the most tokens drafted", int, low=1),
    Option("scope", "run", "suffix tree of earlier outputs: kept for the run, or cleared every generation",
           choices=("run", "generation")),
)


METHODS = [MethodInfo("suffix", "SuffixDecoding (Oliaro et al. 2024): suffix trees over this generation and the run's "
                      "earlier outputs, a frequency-scored speculation tree of up to 1.0 x the match length "
                      "(depth=24, min_prob=0.1, at most 16 tokens; scope=run)", True, Ref.to("specbench.methods.suffix.drafter:build"),
                      ("", "factor=0.5", "factor=2.0", "factor=4.0"), OPTIONS)]
