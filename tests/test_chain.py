"""Draft models on the static runtime (specbench.decode.chain): sps's and swift's drafters keep a static cache of
their own, right-padded rows written at their own slots, every row of a batch drafted in one forward per token.
They must draft exactly what they draft on a growing cache (T=0), sample vanilla's distribution (T>0), and draft a
batch's rows together exactly as each alone."""
from __future__ import annotations

import pytest
import torch

from specbench.decode.chain import StaticChain
from specbench.decode.engine import generate, generate_batch
from specbench.decode.sampling import Sampling
from specbench.decode.self_draft import layer_skip_view
from specbench.decode.static import StaticTarget
from specbench.methods.common.draft_model import DraftModelDrafter
from specbench.methods.vanilla import VanillaDrafter
from tests.conftest import tiny_llama
from tests.stats import goodness_of_fit
from tests.test_distribution import PASS_P, VOCAB, draft_model, exact_joint, prompt, sample_method, target  # noqa: F401

PROMPTS = [[3, 9, 14, 2], [1, 2, 3], [20, 21, 5, 5, 7, 9, 9, 30, 31, 8, 2], [4]]


@pytest.fixture(scope="module")
def four_layers():
    return tiny_llama(64, seed=3, layers=4, hidden=32).eval()


def drafters(model, static: StaticTarget, kind: str) -> tuple[DraftModelDrafter, DraftModelDrafter]:
    """The same draft on a growing cache and on a static chain: the target itself (every draft accepted), a view
    with layers 1 and 2 skipped (the cache keeps the target's layer indices), or over a reduced vocabulary."""
    view = layer_skip_view(model, [1, 2] if kind == "skip" else [])
    vocab = torch.tensor(list(range(0, 64, 2))) if kind == "reduced" else None
    layers = model.config.num_hidden_layers
    return (DraftModelDrafter(view, 3, 64, vocab),
            DraftModelDrafter(view, 3, 64, vocab, StaticChain.of(view, static, layers)))


@pytest.mark.parametrize("kind", ["self", "skip", "reduced"])
def test_a_static_chain_drafts_what_the_growing_cache_drafts(four_layers, kind):
    static = StaticTarget(four_layers, capture=False)
    growing, chained = drafters(four_layers, static, kind)
    deep = 0
    for p in PROMPTS:
        dynamic = generate(four_layers, p, growing, Sampling(), 40, set())
        fixed = generate(four_layers, p, chained, Sampling(), 40, set(), static=static)
        assert fixed.token_ids == dynamic.token_ids == generate(four_layers, p, VanillaDrafter(), Sampling(), 40,
                                                                set()).token_ids
        assert fixed.accept_lengths == dynamic.accept_lengths
        deep += sum(a >= 3 for a in fixed.accept_lengths)
    assert deep >= 4, f"only {deep} steps accepted two draft tokens or more"
    assert chained.chain.static.cache.plan.layers == 4  # the view's cache keeps the target's layer indices


def test_a_batch_drafts_in_one_forward_per_token_as_each_row_alone(four_layers):
    static = StaticTarget(four_layers, capture=False)
    _, chained = drafters(four_layers, static, "skip")
    alone = [generate(four_layers, p, chained, Sampling(), 30, {7}, static=static) for p in PROMPTS]
    forwards = []
    logits = chained.chain.logits
    chained.chain.logits = lambda feeds, lengths: forwards.append(len(feeds)) or logits(feeds, lengths)
    rows = [chained.fork() for _ in PROMPTS]
    together = generate_batch(four_layers, PROMPTS, rows, Sampling(), 30, {7}, static=static)
    for one, batched in zip(alone, together):
        assert batched.token_ids == one.token_ids
        assert batched.accept_lengths == one.accept_lengths
    assert max(a for g in together for a in g.accept_lengths) >= 3  # drafts accepted at depth >= 2
    assert forwards[0] == len(PROMPTS) and max(forwards) == len(PROMPTS)  # every row in each forward
    assert min(forwards) < len(PROMPTS)  # finished rows left (the cache rows after them moved up)
    assert chained.chain.static.cache.plan.rows == 4


def test_a_static_chain_samples_vanillas_joint(target, draft_model, prompt, exact_joint):  # noqa: F811
    static = StaticTarget(target, capture=False)
    drafter = DraftModelDrafter(draft_model, 3, VOCAB, chain=StaticChain.of(draft_model, static))
    result = sample_method(target, prompt, drafter, static=static)
    assert result.deep_accepts >= 600, f"only {result.deep_accepts} draft tokens accepted at depth >= 2"
    assert result.full_paths >= 600, f"only {result.full_paths} fully accepted paths"
    assert goodness_of_fit(result.counts, exact_joint) > PASS_P


def test_rows_that_stay_keep_their_context_when_others_leave(four_layers):
    """Three rows fed together; the first leaves and the other two swap places: each row's next logits are still
    those of its own context (the rows were moved, not mixed up)."""
    static = StaticTarget(four_layers, capture=False)
    chain = StaticChain.of(four_layers, static)
    prompts = PROMPTS[:3]
    with torch.inference_mode():
        chain.arrange([10, 11, 12])
        chain.logits(prompts, [0, 0, 0])
        chain.arrange([12, 11])
        moved = chain.logits([[5], [6]], [len(prompts[2]), len(prompts[1])])
        alone = StaticChain.of(four_layers, StaticTarget(four_layers, capture=False))
        for row, (prompt, token) in enumerate([(prompts[2], 5), (prompts[1], 6)]):
            alone.arrange([1])
            expected = alone.logits([prompt + [token]], [0])
            torch.testing.assert_close(moved[row], expected[0], rtol=1e-4, atol=1e-4)
