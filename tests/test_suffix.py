"""SuffixDecoding: the suffix trees count every bounded substring, the speculation tree is grown best first by path
probability within the adaptive budget, T=0 output is vanilla's with drafts accepted several tokens deep, and the
run's earlier outputs (the global tree) are drafted from when the scope keeps them."""
from __future__ import annotations

import pytest

from specbench.decode.draft import ROOT
from specbench.decode.engine import generate
from specbench.decode.sampling import Sampling
from specbench.errors import SpecbenchError
from specbench.methods.common.frequency_tree import speculate
from specbench.methods.suffix.drafter import SuffixDrafter, SuffixTree, counted_children
from tests.conftest import tiny_llama
from tests.identity import assert_vanilla_tokens_with_deep_accepts

VOCAB = 40


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=4, layers=1, hidden=16, logit_scale=8.0)


def test_tree_counts_every_bounded_substring():
    tree = SuffixTree(depth=3)
    tree.extend([1, 2, 3, 1, 2, 4])
    one_two = tree.root.children[1].children[2]
    assert tree.root.children[1].count == 2 and one_two.count == 2
    assert {t: n.count for t, n in one_two.children.items()} == {3: 1, 4: 1}
    assert 1 not in one_two.children[3].children  # depth 3: no path of four tokens
    node, length = tree.longest_match([9, 3, 1, 2])
    assert node is one_two and length == 2
    assert tree.longest_match([7, 4]) == (None, 0)  # 4 ends the text: nothing followed it


def test_speculation_is_best_first_within_budget_and_min_prob():
    tree = SuffixTree(depth=4)
    for text in ([5, 1, 2, 3], [5, 1, 2, 3], [5, 1, 2, 6], [5, 7, 8, 9]):
        tree.new_text()
        tree.extend(text)
    start = tree.root.children[5]  # followed by 1 (3 times) and 7 (once)
    spec = speculate(start, counted_children, budget=4, min_prob=0.2)
    # 1 (0.75), 1-2 (0.75), 7 (0.25), 1-2-3 (0.5): best first; 1-2-6 (0.25) and 7-8 (0.25) do not fit the budget
    assert spec.draft.tokens == [1, 2, 3, 7] and spec.draft.parents == [ROOT, 0, 1, ROOT]
    assert spec.expected == pytest.approx(0.75 + 0.75 + 0.5 + 0.25)
    assert speculate(start, counted_children, budget=10, min_prob=0.3).draft.tokens == [1, 2, 3]  # 7 and 6 below 0.3


@pytest.mark.parametrize("scope", ["run", "generation"])
def test_t0_identical_to_vanilla_with_deep_accepts(target, scope):
    assert_vanilla_tokens_with_deep_accepts(target, SuffixDrafter(scope=scope))


def test_the_run_scope_drafts_from_earlier_outputs(target):
    prompt = [3, 9, 14, 2, 30]
    taus = {}
    for scope in ("run", "generation"):
        drafter = SuffixDrafter(scope=scope, factor=4.0)
        first = generate(target, prompt, drafter, Sampling(), 32, set())
        again = generate(target, prompt, drafter, Sampling(), 32, set())
        assert again.token_ids == first.token_ids
        taus[scope] = len(again.token_ids) / len(again.accept_lengths)
    # The same question again: the global tree holds the whole earlier answer, so long drafts are accepted.
    assert taus["run"] > taus["generation"] + 0.5, taus
    with pytest.raises(SpecbenchError, match="scope"):
        SuffixDrafter(scope="forever")
