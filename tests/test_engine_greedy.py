"""T=0 in fp32: every drafter must emit exactly vanilla's token ids; tree masks and cache compaction are exact."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from specbench.decode.draft import Draft, Drafter
from specbench.decode.drafting import alike
from specbench.decode.engine import generate
from specbench.decode.inputs import ancestors, row_blocks, target_forward
from specbench.decode.runner import ModelRunner
from specbench.decode.sampling import Sampling
from specbench.decode.verify import child_with
from specbench.methods.common.draft_model import DraftModelDrafter
from specbench.methods.pld.drafter import PromptLookupDrafter
from specbench.methods.vanilla.drafter import VanillaDrafter
from tests.conftest import tiny_llama
from tests.drafters import ModelTreeDrafter, RandomTreeDrafter

VOCAB = 48


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=0, logit_scale=3.0)


@pytest.fixture(scope="module")
def prompts():
    rng = random.Random(0)
    # Some prompts repeat a phrase so prompt lookup finds matches.
    out = []
    for i in range(12):
        base = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 20))]
        out.append(base * (1 + i % 3))
    return out


def vanilla(target, prompt, n=40):
    return generate(target, prompt, VanillaDrafter(), Sampling(), n, set()).token_ids


def test_vanilla_matches_hf_generate(target, prompts):
    for prompt in prompts[:4]:
        ids = torch.tensor([prompt])
        expected = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=30,
                                   min_new_tokens=30, pad_token_id=0)[0, len(prompt):].tolist()
        assert vanilla(target, prompt, 30) == expected


@pytest.mark.parametrize("make", [
    lambda t: PromptLookupDrafter(),
    lambda t: DraftModelDrafter(tiny_llama(VOCAB, seed=5, logit_scale=3.0), gamma=4, vocab_size=VOCAB),
    lambda t: DraftModelDrafter(t, gamma=3, vocab_size=VOCAB),  # the target as its own draft: all accepted
    lambda t: ModelTreeDrafter(tiny_llama(VOCAB, seed=6, logit_scale=3.0), width=3),
], ids=["pld", "sps", "sps-self", "model-tree"])
def test_drafters_emit_vanillas_tokens(target, prompts, make):
    drafter = make(target)
    accepted_beyond_one = 0
    for prompt in prompts:
        result = generate(target, prompt, drafter, Sampling(), 40, set())
        assert result.token_ids == vanilla(target, prompt)
        accepted_beyond_one += sum(a > 1 for a in result.accept_lengths)
    assert accepted_beyond_one > 0, "the drafter never got a token accepted: the test proves nothing"


def test_random_trees_emit_vanillas_tokens(target, prompts):
    longest = 0
    for i, prompt in enumerate(prompts):
        reference = vanilla(target, prompt)
        for seed in range(3):
            for ref in (reference, None):
                result = generate(target, prompt, RandomTreeDrafter(VOCAB, 100 * i + seed, ref), Sampling(), 40, set())
                assert result.token_ids == reference
                longest = max(longest, max(result.accept_lengths))
    assert longest >= 4


def test_stop_token_ends_every_method_alike(target, prompts):
    prompt = prompts[1]
    reference = vanilla(target, prompt)
    stop = reference[10]
    expected = reference[: reference.index(stop) + 1]
    for drafter in (VanillaDrafter(), RandomTreeDrafter(VOCAB, 1, reference), DraftModelDrafter(target, 4, VOCAB)):
        result = generate(target, prompt, drafter, Sampling(), 40, {stop})
        assert result.token_ids == expected and result.stop_reason == "eos"


def step_logits(runner: ModelRunner, pending: list[int], draft: Draft, start: int) -> torch.Tensor:
    """The logits of the pending tokens and the draft's nodes [n, V], written from slot `start` of row 0, as the
    engine runs a step at the runner's shape (its pad tokens' logits dropped)."""
    model = runner.model
    blocks = row_blocks([pending], [draft], [start])
    shape = runner.fit(1, blocks.lengths[0], start)
    out, pads = target_forward(runner, blocks, [start], shape, shape.tokens, False, model.dtype, model.device)
    return out.logits[0, pads[0]:]


@pytest.mark.parametrize("fixed_shapes", [False, True])
def test_tree_mask_gives_each_node_its_path_logits(target, fixed_shapes):
    context = [3, 9, 4, 4, 17, 2]
    draft = Draft(tokens=[5, 6, 7, 8, 9, 10], parents=[-1, -1, 0, 0, 1, 3])
    runner = ModelRunner(target, fixed_shapes=fixed_shapes)
    with torch.inference_mode():
        step_logits(runner, context[:-1], Draft(), 0)
        tree_logits = step_logits(runner, context[-1:], draft, len(context) - 1)
        for node in range(len(draft)):
            path, p = [], node
            while p != -1:
                path.insert(0, draft.tokens[p])
                p = draft.parents[p]
            alone = target(torch.tensor([context + path])).logits[0, -1]
            torch.testing.assert_close(tree_logits[node + 1], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fixed_shapes", [False, True])
def test_compaction_keeps_the_accepted_path_only(target, fixed_shapes):
    context = [1, 2, 3, 4, 5]
    draft = Draft(tokens=[7, 8, 9, 10], parents=[-1, -1, 1, 2])  # accept nodes 1, 2, 3: a path with a gap
    runner = ModelRunner(target, fixed_shapes=fixed_shapes)
    with torch.inference_mode():
        step_logits(runner, context, draft, 0)
        base = len(context)  # the tree's first slot: node i at base + i, moved down to follow the context
        runner.cache.move_slots(torch.tensor([[base + 1, base + 2, base + 3]]), torch.tensor([[base, base + 1, base + 2]]))
        continued = step_logits(runner, [11], Draft(), base + 3)[-1]
        fresh = target(torch.tensor([context + [8, 9, 10, 11]])).logits[0, -1]
    torch.testing.assert_close(continued, fresh, atol=1e-5, rtol=1e-5)


def test_draft_limited_drops_deep_nodes():
    draft = Draft(tokens=[1, 2, 3, 4], parents=[-1, 0, -1, 1])
    cut = draft.limited(2)
    assert cut.tokens == [1, 2, 3] and cut.parents == [-1, 0, -1]
    assert len(draft.limited(0)) == 0
    assert draft.limited(3) is draft  # nothing deeper than 3: the draft as it is


def test_a_child_is_found_by_its_parent_and_token():
    """The greedy walk's search: a node carrying the token under another parent is passed over."""
    draft = Draft(tokens=[5, 7, 5, 9, 7], parents=[-1, -1, 1, 0, 1])
    assert [child_with(draft, node, token) for node, token in ((-1, 5), (1, 5), (0, 5), (1, 7), (0, 9), (-1, 9))] \
        == [0, 2, None, 4, 3, None]


def test_a_batched_call_treats_drafters_as_one_only_when_alike():
    class Own(Drafter):
        def propose(self, ctx):
            return Draft()

    class Inherits(Own):
        pass

    class Overrides(Own):
        def propose(self, ctx):
            return Draft()

    head = object()
    a, b, c, d = Own(), Own(), Inherits(), Overrides()
    for drafter in (a, b, c, d):
        drafter.head = head
    assert alike([a, b, c], Own, "propose", ("head",))
    assert not alike([a, d], Own, "propose", ("head",))  # a propose of its own: row by row
    b.head = object()
    assert not alike([a, b], Own, "propose", ("head",))  # another head
    assert alike([a, b], Own, "propose", ())


def test_bad_tree_is_rejected():
    for parents, node in (([1, -1], 0), ([-1, 0, 2], 2), ([-1, -2], 1), ([-1, 0, 1, 3, 1], 3)):
        with pytest.raises(ValueError, match=f"draft node {node} has parent {parents[node]}"):
            Draft(tokens=list(range(len(parents))), parents=parents)
    with pytest.raises(ValueError, match="one parent per token"):
        Draft(tokens=[1, 2], parents=[-1])
    assert Draft(tokens=[1, 2, 3], parents=[-1, 0, -1]).parents == [-1, 0, -1]


@pytest.mark.parametrize("shape", [(5, 7, 7), (3, 4, 2), (3, 1, 1)])
def test_lookahead_emits_vanilla_tokens(target, prompts, shape):
    from specbench.methods.lookahead.drafter import LookaheadDrafter

    drafter = LookaheadDrafter(*shape)
    accepted_more_than_one = 0
    for prompt in prompts:
        got = generate(target, prompt, drafter, Sampling(), 40, set())
        assert got.token_ids == vanilla(target, prompt)
        accepted_more_than_one += sum(a > 1 for a in got.accept_lengths)
    if shape[2] > 0:
        assert accepted_more_than_one > 0  # the pool's guesses were used, so the trie and window were exercised


def test_ancestors_by_pointer_jumping_equal_the_walk_up_each_path():
    gen = torch.Generator().manual_seed(0)
    for n in range(1, 70):
        parents = [-1] + [int(torch.randint(-1, i, (), generator=gen)) for i in range(1, n)]
        reference = torch.eye(n, dtype=torch.bool)
        for i, parent in enumerate(parents):
            if parent >= 0:
                reference[i] |= reference[parent]
        own_parent = np.array([[i if parent < 0 else parent for i, parent in enumerate(parents)]])
        assert torch.equal(torch.from_numpy(ancestors(own_parent)[0]), reference), parents
    chain = torch.from_numpy(ancestors(np.array([[0, *range(9)]]))[0])
    assert torch.equal(chain, torch.ones(10, 10, dtype=torch.bool).tril())
