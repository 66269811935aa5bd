"""Prompt lookup decoding (Saxena 2023): copy the continuation of an earlier occurrence of the last n-gram.

By default Saxena's rule, as the reference code (github.com/apoorvumang/prompt-lookup-decoding) has it: the earliest
match with a full 10-token continuation, n = 3, 2, 1; held to that code step by step (tests/test_conformance.py).
`rule=hf` is transformers' rule (prompt_lookup_num_tokens), which also proposes a shorter continuation. The drafter:
drafter.py."""
from __future__ import annotations

from specbench.method import MethodInfo, Option, Ref, preset_option

# Saxena's reference settings (greedy_search_pld's call in demo-pld.ipynb: a 3-gram window, 10 tokens), which are
# also the defaults here.
PAPER = {"paper": "rule=saxena:max_ngram=3:min_ngram=1:num_tokens=10"}
OPTIONS = (
    Option("max_ngram", 3, "the longest n-gram looked up", int, low=1),
    Option("min_ngram", 1, "the shortest n-gram looked up", int, low=1),
    Option("num_tokens", 10, "tokens drafted after a match", int, low=1),
    Option("rule", "saxena", "which match is drafted: saxena (the reference: the earliest with a full num_tokens "
           "continuation) or hf (transformers': the earliest, its continuation cut at the end of the text)", str,
           choices=("saxena", "hf")),
    preset_option(PAPER),
)


METHODS = [MethodInfo("pld", "prompt lookup (Saxena's rule): copy the 10 tokens that followed the last 3/2/1-gram earlier in the text", True, Ref.to("specbench.methods.pld.drafter:build"),
                      ("", "num_tokens=2", "num_tokens=4", "num_tokens=6"), OPTIONS, presets=PAPER)]
