"""SAM-Decoding: the suffix automaton finds the longest earlier repeat of the text's suffix and its first
occurrence, drafts come from the longer of the dynamic and the static match, the auxiliary method drafts below the
threshold and sees every step, and T=0 output is vanilla's with drafts accepted several tokens deep."""
from __future__ import annotations

import numpy as np
import pytest

from specbench.decode.draft import DecodeContext, Draft, parse_tree
from specbench.decode.engine import generate
from specbench.decode.sampling import Sampling
from specbench.errors import SpecbenchError
from specbench.methods.common.datastore import Datastore
from specbench.methods.recycling import DEFAULT_TREE
from specbench.methods.recycling.drafter import RecyclingDrafter
from specbench.methods.samd.drafter import SamDrafter, SuffixAutomaton
from specbench.methods.vanilla.drafter import VanillaDrafter
from tests.conftest import tiny_llama
from tests.identity import assert_vanilla_tokens_with_deep_accepts

VOCAB = 40


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=4, layers=1, hidden=16, logit_scale=8.0)


def brute_repeat(text: list[int]) -> tuple[int, int]:
    """The longest proper suffix of text that also ends earlier, and where it first ends."""
    for n in range(len(text) - 1, 0, -1):
        suffix = text[-n:]
        ends = [i + n - 1 for i in range(len(text) - n) if text[i : i + n] == suffix]
        if ends:
            return n, ends[0]
    return 0, -1


def test_automaton_finds_the_longest_earlier_repeat_and_its_first_end():
    rng = np.random.default_rng(1)
    for _ in range(50):
        text = rng.integers(0, 3, size=int(rng.integers(1, 40))).tolist()
        automaton = SuffixAutomaton()
        for i, token in enumerate(text):
            automaton.add(token)
            assert automaton.earlier_repeat() == brute_repeat(text[: i + 1]), text[: i + 1]


class Fallback(VanillaDrafter):
    def __init__(self) -> None:
        self.proposed = self.told = 0

    def propose(self, ctx):
        self.proposed += 1
        return Draft([7], [-1])

    def accepted(self, ctx, step):
        self.told += 1


def test_longer_match_wins_and_the_fallback_drafts_below_the_threshold():
    store = Datastore.of([np.array([1, 2, 3, 4, 5, 6, 7, 8]), np.array([9, 3, 4, 30, 31])])
    aux = Fallback()
    drafter = SamDrafter(store, aux, draft_len=3, threshold=3)
    ctx = DecodeContext([0, 2, 3, 4], 1, Sampling(), None)
    drafter.begin(ctx)
    assert drafter.propose(ctx).tokens == [5, 6, 7]  # static: "2 3 4" (3 tokens) beats "3 4" elsewhere
    ctx = DecodeContext([11, 12, 13, 14, 11, 12, 13], 1, Sampling(), None)
    drafter.begin(ctx)
    assert drafter.propose(ctx).tokens == [14, 11, 12]  # dynamic: "11 12 13" repeated
    ctx = DecodeContext([20, 21], 1, Sampling(), None)
    drafter.begin(ctx)
    assert drafter.propose(ctx).tokens == [7] and aux.proposed == 1  # no match of 3 tokens: the fallback
    with pytest.raises(SpecbenchError, match="threshold"):
        SamDrafter(store, aux, threshold=0)


def test_t0_identical_to_vanilla_with_deep_accepts(target):
    others = [generate(target, [p], VanillaDrafter(), Sampling(), 48, set()).token_ids for p in range(VOCAB)]
    aux = RecyclingDrafter(VOCAB, parse_tree(DEFAULT_TREE), "generation")
    assert_vanilla_tokens_with_deep_accepts(target, SamDrafter(Datastore.of([np.array(o) for o in others]), aux))
    assert (aux.matrix >= 0).any()  # the fallback was told every step
