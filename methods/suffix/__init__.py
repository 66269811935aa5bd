"""SuffixDecoding (Oliaro et al. 2024, "SuffixDecoding: Extreme Speculative Decoding for Emerging AI Applications";
the method behind vLLM's suffix decoding): no draft model and no training.

The method as its authors' code (Snowflake's arctic-inference, which vLLM's suffix decoding calls) does it, rule
for rule (tree.py; held to it step by step by tests/test_conformance.py): two suffix trees of bounded depth with
occurrence counts, one per generation over its prompt and its output as it grows, one over the run's outputs (the
global tree; the current output enters it as it grows). Each step, from the text's last `depth` tokens, every match
length the tree holds is tried: a match of L tokens may draft int(factor x L) tokens (the paper's adaptive
speculation length, at most max_tokens), grown best first by path probability (a child's count over its parent's),
paths below min_prob left out; the draft of the highest score (the sum of its nodes' probabilities) wins, the
longer match on a tie, and of the two trees' drafts the higher score (the generation's own on a tie). The first
draft follows the prefill's token, as the reference is driven.

State: the global tree lives for the run (scope=run, the default, as in the paper) or holds only the current
generation (scope=generation). The candidates are deterministic, so the engine verifies them losslessly at any
temperature.

The drafter: drafter.py."""
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
