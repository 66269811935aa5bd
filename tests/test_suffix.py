"""SuffixDecoding: the suffix trees count every bounded substring, the speculation tree is grown best first by path
probability within the adaptive budget (the reference's rules: tests/test_conformance.py), T=0 output is vanilla's with drafts accepted several tokens deep, and the
run's earlier outputs (the global tree) are drafted from when the scope keeps them."""
from __future__ import annotations

import pytest

from specbench.decode.draft import ROOT
from specbench.decode.engine import generate
from specbench.decode.sampling import Sampling
from specbench.errors import SpecbenchError
from specbench.methods.suffix.drafter import SuffixDrafter
from specbench.methods.suffix.tree import SuffixTree, speculate, speculate_tree
from tests.conftest import tiny_llama
from tests.identity import assert_vanilla_tokens_with_deep_accepts

VOCAB = 40


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=4, layers=1, hidden=16, logit_scale=8.0)


def test_tree_counts_every_bounded_substring_and_orders_children_by_count():
    tree = SuffixTree(depth=3)
    tree.extend([1, 2, 3, 1, 2, 4, 1, 2, 4])
    one_two = tree.root.by_token[1].by_token[2]
    assert tree.root.by_token[1].count == 3 and one_two.count == 3
    # 3 came first, then 4 outnumbered it: children by decreasing count
    assert [(n.token, n.count) for n in one_two.children] == [(4, 2), (3, 1)]
    assert not one_two.by_token[4].children and not one_two.by_token[3].children  # depth 3: no four-token paths
    assert tree.match([1, 2]) is one_two and tree.match([7]) is None
    # 4 ends the text: its count holds the suffix that ends there, which no child continues
    assert tree.root.by_token[4].count == 2 and tree.root.by_token[4].children[0].count == 1


def test_speculation_is_best_first_by_count_over_parent_count_within_budget():
    tree = SuffixTree(depth=4)
    for text in ([5, 1, 2, 3], [5, 1, 2, 3], [5, 1, 2, 6], [5, 7, 8, 9]):
        tree.new_text()
        tree.extend(text)
    start = tree.match([5])  # followed by 1 (3 times) and 7 (once)
    spec = speculate_tree(start, budget=4, min_prob=0.2)
    # 1 (0.75), 1-2 (0.75), 1-2-3 (0.5), then 7 and 1-2-6 (0.25 each): the reference's queue takes 6
    assert spec.tokens == [1, 2, 3, 6] and spec.parents == [ROOT, 0, 1, 1]
    assert float(spec.score) == pytest.approx(0.75 + 0.75 + 0.5 + 0.25)
    assert speculate_tree(start, budget=10, min_prob=0.3).tokens == [1, 2, 3]  # 7 and 6 below 0.3
    # every match length is tried and the best score kept: "1" may draft 2 tokens (2, 3: 1.67), "5 1" four (2, 3,
    # 6: 2.0; 3 and 6 follow "5 1 2" 2 and 1 times in 3); "9 5 1" is not in the tree
    best = speculate(tree, [9, 5, 1], max_tokens=4, factor=2.0, min_prob=0.2)
    assert (best.tokens, best.parents, float(best.score)) == ([2, 3, 6], [ROOT, 0, 0], pytest.approx(2.0))


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
