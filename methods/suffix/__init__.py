"""SuffixDecoding (Oliaro et al. 2024, "SuffixDecoding: Extreme Speculative Decoding for Emerging AI Applications";
the method behind vLLM's suffix decoding): no draft model and no training.

Two suffix trees of bounded depth with occurrence counts: one per generation over its prompt and output so far,
one over the earlier outputs of the run (global). Each step finds the longest suffix of the text (at most `depth`
tokens) that the tree has seen followed by something, and grows a speculation tree from there, best first, by the
empirical probability of each path (the product of child count / sum of its siblings' counts), keeping nodes of
probability >= min_prob, up to `factor` x the match length nodes (the paper's adaptive speculation length: a long
match is trusted further) and at most max_tokens. Of the two trees' proposals the one with the larger expected
number of accepted tokens (the sum of its nodes' probabilities) is drafted.

State: the global tree lives for the run (scope=run, the default, as in the paper) or is cleared every turn
(scope=generation). A finished output enters it when the next generation begins. The candidates are deterministic,
so the engine verifies them losslessly at any temperature.

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
