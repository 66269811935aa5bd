"""REST (He et al. 2024, "REST: Retrieval-Based Speculative Decoding"): no draft model and no training; drafts come
from a datastore of text (methods/common/datastore.py: training replies and their suffix array).

Each step takes the longest suffix of the text (16 tokens down to 2) that occurs in the corpus; its occurrences form
one range of the suffix array, and every continuation of it is a sub-range, so the continuations' exact counts come
from the array itself. The draft is the trie of the most frequent continuations (REST's frequency-based selection),
grown best first by path probability up to `max_tokens` nodes of at most `depth` tokens each, and verified as a
tree. The candidates are deterministic, so the engine verifies them losslessly at any temperature.

The drafter: drafter.py."""
from __future__ import annotations

from specbench.method import MethodInfo, Option, Ref
from specbench.methods.common.options import DATASTORE_OPTIONS

OPTIONS = (
    *DATASTORE_OPTIONS,
    Option("max_ngram", 16, "the longest suffix looked up", int, low=1),
    Option("min_ngram", 2, "the shortest suffix looked up", int, low=1),
    Option("depth", 10, "the deepest trie level drafted", int, low=1),
    Option("max_tokens", 16, "the most tokens drafted (trie nodes)", int, low=1),
)


METHODS = [MethodInfo("rest", "REST (He et al. 2024): the most frequent continuations of the longest suffix (16..2 "
                      "tokens) found in a datastore of training replies (suffix array), a trie of up to 16 tokens",
                      True, Ref.to("specbench.methods.rest.drafter:build"), ("", "max_tokens=4", "max_tokens=8", "max_tokens=32"), OPTIONS)]

# `python -m specbench datastore build` finds it here; samd reads the same datastore.
DATASTORES = {"retrieval datastore (rest, samd)": Ref.to("specbench.methods.common.datastore:build_datastore")}
