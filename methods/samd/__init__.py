"""SAM-Decoding (Hu et al. 2024, "SAM Decoding: Speculative Decoding via Suffix Automaton"): the longest suffix of
the text that occurred before, found with a suffix automaton over the current generation (dynamic) and in a corpus
(static), drafts what followed that occurrence; when both matches are short an auxiliary method drafts instead.

The dynamic automaton grows with every emitted token (amortised O(1)); the longest earlier repeat of the text's
suffix is the suffix link of its last state, and the state keeps the end of its first occurrence. The static side
is the retrieval datastore REST uses too (methods/common/datastore.py, built once per target), whose suffix array answers
the same longest-match query; the earliest occurrence's continuation is drafted, as a suffix automaton's first end position
gives. The longer of the two matches wins; if it is shorter than `threshold` tokens the auxiliary method drafts.

The auxiliary method is built by name through the build context (`aux=recycling`, the default: "SAM-Decoding with Token
Recycling"; any method that drafts from the engine's step results alone), so this file knows no other method.
It sees every step, whoever drafted, so its state stays current.

The drafter: drafter.py."""
from __future__ import annotations

from specbench.method import MethodInfo, Option, Ref
from specbench.methods.common.options import DATASTORE_OPTIONS, HEAD


def samd_options(aux: str) -> tuple[Option, ...]:
    return (
        Option("aux", aux, "the method that drafts when the match is short (any that drafts from the engine's step "
               "results alone)"),
        HEAD,  # the auxiliary method's trained drafter
        Option("static", "on", "also match in the retrieval datastore", choices=("on", "off")),
        *DATASTORE_OPTIONS,
        Option("draft_len", 8, "tokens drafted after a match", int, low=1),
        Option("threshold", 3, "the shortest match used; shorter ones let the auxiliary method draft", int, low=1),
        Option("max_ngram", 16, "the longest suffix looked up in the datastore", int, low=1),
    )


TUNING = ("", "draft_len=4", "draft_len=12", "draft_len=16")
METHODS = [
    MethodInfo("samd", "SAM-Decoding (Hu et al. 2024): the longest earlier repeat of the text's suffix, by a suffix "
               "automaton over the generation and in the retrieval datastore, drafts 8 tokens; below 3 matched tokens "
               "Token Recycling drafts (aux=recycling)", True, Ref.to("specbench.methods.samd.drafter:build"), TUNING, samd_options("recycling")),
    MethodInfo("samd-eagle", "SAM-Decoding with EAGLE-2 as the auxiliary drafter (Spec-Bench's first place): as samd, "
               "with aux=eagle", True, Ref.to("specbench.methods.samd.drafter:build"), TUNING, samd_options("eagle")),
]
