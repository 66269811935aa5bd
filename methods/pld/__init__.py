"""Prompt lookup decoding (Saxena 2023): copy the continuation of an earlier occurrence of the last n-gram.

The drafter: drafter.py."""
from __future__ import annotations

from specbench.method import MethodInfo, Option, Ref

OPTIONS = (
    Option("max_ngram", 3, "the longest n-gram looked up", int, low=1),
    Option("min_ngram", 1, "the shortest n-gram looked up", int, low=1),
    Option("num_tokens", 10, "tokens drafted after a match", int, low=1),
)


METHODS = [MethodInfo("pld", "prompt lookup: copy what followed the last 3/2/1-gram earlier in the text (10 tokens)", True, Ref.to("specbench.methods.pld.drafter:build"),
                      ("", "num_tokens=2", "num_tokens=4", "num_tokens=6"), OPTIONS)]
