"""Token Recycling: the matrix holds the target's top-k after each scored token, drafts expand the template from it,
T=0 output is vanilla's with drafts accepted several tokens deep, and state follows its scope."""
from __future__ import annotations

import pytest
import torch

from specbench.decode.draft import ROOT, parse_tree
from specbench.decode.engine import generate
from specbench.decode.sampling import Sampling
from specbench.errors import SpecbenchError
from specbench.methods.recycling import DEFAULT_TREE
from specbench.methods.recycling.drafter import EMPTY, RecyclingDrafter
from tests.conftest import tiny_llama
from tests.identity import assert_vanilla_tokens_with_deep_accepts

VOCAB = 40


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=4, layers=1, hidden=16, logit_scale=8.0)


def test_matrix_rows_are_the_targets_top_k_after_each_scored_token(target):
    prompt = [3, 9, 14, 2]
    drafter = RecyclingDrafter(VOCAB, parse_tree(DEFAULT_TREE), "generation")
    out = generate(target, prompt, drafter, Sampling(), 12, set())
    k = drafter.k
    # The last token scored as a root is the one before the final bonus; its row is the target's top-k after the
    # whole context up to it (every row is refreshed at its latest scoring, so check a root row exactly).
    context = prompt + out.token_ids[:-1]
    with torch.no_grad():
        expected = target(torch.tensor([context])).logits[0, -1].topk(k).indices.tolist()
    assert drafter.matrix[context[-1]].tolist() == expected
    assert int((drafter.matrix != EMPTY).any(dim=1).sum()) >= 5  # draft nodes were recycled too


def test_draft_expands_the_template_from_the_matrix():
    tree = parse_tree("[[0],[1],[0,0],[1,0],[0,0,0]]")
    drafter = RecyclingDrafter(10, tree)
    drafter.matrix[5] = torch.tensor([7, 8])
    drafter.matrix[7, 0] = 2  # 7's second candidate is unknown; 8 has no row: [1,0] is not drafted
    drafter.matrix[2] = torch.tensor([4, 1])

    class Ctx:
        token_ids = [1, 5]

    draft = drafter.propose(Ctx())
    assert draft.tokens == [7, 8, 2, 4] and draft.parents == [ROOT, ROOT, 0, 2]


@pytest.mark.parametrize("scope", ["run", "generation"])
def test_t0_identical_to_vanilla_with_deep_accepts(target, scope):
    assert_vanilla_tokens_with_deep_accepts(target, RecyclingDrafter(VOCAB, parse_tree(DEFAULT_TREE), scope))


def test_scope_decides_whether_the_matrix_outlives_a_generation(target):
    for scope, kept in (("run", True), ("generation", False)):
        drafter = RecyclingDrafter(VOCAB, parse_tree(DEFAULT_TREE), scope)
        generate(target, [3, 9, 14, 2], drafter, Sampling(), 8, set())
        filled = drafter.matrix.clone()
        drafter.begin(type("Ctx", (), {"token_ids": [1, 2]})())
        assert torch.equal(drafter.matrix, filled) == kept
    with pytest.raises(SpecbenchError, match="scope"):
        RecyclingDrafter(VOCAB, parse_tree(DEFAULT_TREE), "forever")
