"""Draft models' chains (specbench.decode.chain.DraftChain): sps's and swift's drafters keep a slot cache of their
own beside the target's runner, right-padded rows written at their own slots, every row of a batch drafted in one
forward per token. At fixed shapes (padded, as `--graphs on` runs them) they must draft exactly what they draft
at their own shapes (T=0), sample vanilla's distribution (T>0), and draft a batch's rows together exactly as each
alone."""
from __future__ import annotations

import pytest
import torch

from specbench.decode.engine import generate, generate_batch
from specbench.decode.runner import CAPACITY_STEP, ModelRunner, keep_rows
from specbench.decode.sampling import Sampling
from specbench.methods.common.draft_model import DraftModelDrafter, draft_chain
from specbench.methods.swift.drafter import layer_skip_view
from specbench.methods.vanilla.drafter import VanillaDrafter
from tests.conftest import tiny_llama
from tests.test_distribution import (  # noqa: F401 (fixtures)
    LOSSLESS,
    assert_lossless,
    chained,
    draft_model,
    exact_joint,
    prompt,
    sample_method,
    target,
)

PROMPTS = [[3, 9, 14, 2], [1, 2, 3], [20, 21, 5, 5, 7, 9, 9, 30, 31, 8, 2], [4]]


@pytest.fixture(scope="module")
def four_layers():
    return tiny_llama(64, seed=3, layers=4, hidden=32).eval()


def drafter(model, runner: ModelRunner, kind: str) -> DraftModelDrafter:
    """A draft beside the target's runner: the target itself (every draft accepted), a view with layers 1 and 2
    skipped (the cache keeps the target's layer indices), or over a reduced vocabulary."""
    view = layer_skip_view(model, [1, 2] if kind == "skip" else [])
    vocab = torch.tensor(list(range(0, 64, 2))) if kind == "reduced" else None
    return DraftModelDrafter(view, 3, 64, vocab, draft_chain(view, runner, vocab, model.config.num_hidden_layers))


@pytest.mark.parametrize("kind", ["self", "skip", "reduced"])
def test_a_fixed_shapes_chain_drafts_what_an_own_shapes_chain_drafts(four_layers, kind):
    own_runner, fixed_runner = ModelRunner(four_layers, fixed_shapes=False), ModelRunner(four_layers, fixed_shapes=True)
    own, chained = drafter(four_layers, own_runner, kind), drafter(four_layers, fixed_runner, kind)
    deep = 0
    for p in PROMPTS:
        dynamic = generate(four_layers, p, own, Sampling(), 40, set(), runner=own_runner)
        fixed = generate(four_layers, p, chained, Sampling(), 40, set(), runner=fixed_runner)
        assert fixed.token_ids == dynamic.token_ids == generate(four_layers, p, VanillaDrafter(), Sampling(), 40,
                                                                set()).token_ids
        assert fixed.accept_lengths == dynamic.accept_lengths
        deep += sum(a >= 3 for a in fixed.accept_lengths)
    assert deep >= 4, f"only {deep} steps accepted two draft tokens or more"
    assert len(chained.chain.runner.cache.layers) == 4  # the view's cache keeps the target's layer indices
    assert chained.chain.runner.fixed_shapes and chained.chain.runner.capacity % CAPACITY_STEP == 0


def test_a_batch_drafts_in_one_forward_per_token_as_each_row_alone(four_layers):
    runner = ModelRunner(four_layers, fixed_shapes=True)
    chained = drafter(four_layers, runner, "skip")
    alone = [generate(four_layers, p, chained, Sampling(), 30, {7}, runner=runner) for p in PROMPTS]
    forwards = []
    logits = chained.chain.logits
    chained.chain.logits = lambda feeds, lengths, rows: forwards.append(len(feeds)) or logits(feeds, lengths, rows)
    rows = [chained.fork() for _ in PROMPTS]
    together = generate_batch(four_layers, PROMPTS, rows, Sampling(), 30, {7}, runner=runner)
    for one, batched in zip(alone, together):
        assert batched.token_ids == one.token_ids
        assert batched.accept_lengths == one.accept_lengths
    assert max(a for g in together for a in g.accept_lengths) >= 3  # drafts accepted at depth >= 2
    assert forwards[0] == len(PROMPTS) and max(forwards) == len(PROMPTS)  # every row in each forward
    assert min(forwards) < len(PROMPTS)  # finished rows left (the cache rows after them moved up)
    assert chained.chain.runner.cache.rows == 4


def test_a_fixed_shapes_chain_samples_vanillas_joint(target, draft_model, prompt, exact_joint):  # noqa: F811
    runner = ModelRunner(target, fixed_shapes=True)
    result = sample_method(target, prompt, chained(draft_model, runner), runner=runner)
    assert_lossless(LOSSLESS["sps (chain with q)"], result, exact_joint)  # the same drafter, its power floors


def alone_logits(model, fixed_shapes: bool, context: list[int]) -> torch.Tensor:
    """The draft's next logits after `context`, fed alone to a chain of its own."""
    return draft_chain(model, ModelRunner(model, fixed_shapes)).logits([context], [0], [0])[0]


@pytest.mark.parametrize("fixed_shapes", [False, True])
def test_rows_that_stay_keep_their_context_when_others_leave(four_layers, fixed_shapes):
    """Three rows fed together; the first leaves (the engine's keep_rows: the last row fills its place): each row's
    next logits are still those of its own context (the rows were moved, not mixed up)."""
    chain = draft_chain(four_layers, ModelRunner(four_layers, fixed_shapes))
    prompts = PROMPTS[:3]
    with torch.inference_mode():
        chain.logits(prompts, [0, 0, 0], [0, 1, 2])
        assert keep_rows([chain.runner], [1, 2]) == [2, 1]  # batch row 0 now holds prompt 2, row 1 prompt 1
        moved = chain.logits([[5], [6]], [len(prompts[2]), len(prompts[1])], [0, 1])
        for row, (prompt, token) in enumerate([(prompts[2], 5), (prompts[1], 6)]):
            torch.testing.assert_close(moved[row], alone_logits(four_layers, fixed_shapes, prompt + [token]),
                                       rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fixed_shapes", [False, True])
def test_a_call_over_some_rows_in_any_order_feeds_those_rows_only(four_layers, fixed_shapes):
    """Rows 2 and 0 of three fed in that order (a subset of the batch's rows, named by cache_rows), then row 1: each
    row's logits are those of its own context."""
    chain = draft_chain(four_layers, ModelRunner(four_layers, fixed_shapes))
    prompts = PROMPTS[:3]
    with torch.inference_mode():
        chain.logits(prompts, [0, 0, 0], [0, 1, 2])
        some = chain.logits([[5], [6]], [len(prompts[2]), len(prompts[0])], [2, 0])
        rest = chain.logits([[7]], [len(prompts[1])], [1])
        expected = [prompts[2] + [5], prompts[0] + [6], prompts[1] + [7]]
        for got, context in zip([some[0], some[1], rest[0]], expected):
            torch.testing.assert_close(got, alone_logits(four_layers, fixed_shapes, context), rtol=1e-4, atol=1e-4)
