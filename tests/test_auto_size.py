"""EAGLE-2's tree sized per step from the run's fixed costs (total_tokens=auto): the size that maximises expected
tokens per second, and a depth cut where a level costs more than it can add. Rows drafted together are verified in
one forward, so at batch size above one a row's tree is costed as its share of that forward: trees shrink where
the verification cost grows with the tokens (a CPU, a large batch) and stay where it does not."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
import torch

from specbench.decode.cost_model import SIZES as SIZES_MEASURED
from specbench.decode.cost_model import CostCurve
from specbench.decode.costs import CONTEXT
from specbench.decode.engine import generate, generate_batch
from specbench.decode.runner import ModelRunner
from specbench.decode.sampling import Sampling
from specbench.methods.common.feature_tree import TreeSpec, measure_level_seconds
from specbench.methods.eagle.drafter import EagleDrafter
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.run.decoder import measure_cost_model
from specbench.run.synthetic import SyntheticAcceptance
from tests.conftest import tiny_llama
from tests.test_eagle import random_head
from tests.test_eagle3 import target  # noqa: F401 (fixture)
from tests.test_head_cache import PROMPTS, beside, trained_eagle

SIZES = [1, 2, 4, 8, 16, 32]
RISING = CostCurve(SIZES, [0.010 * (1 + n / 8) for n in SIZES])  # a CPU's: each token adds an eighth of T(1)
FLAT = CostCurve(SIZES, [0.010] * len(SIZES))  # a large GPU's at these sizes
SCORES = [math.log(p) for p in (0.9, 0.8, 0.6, 0.5, 0.4, 0.3, 0.25, 0.2, 0.15, 0.1, 0.08, 0.05)]


@pytest.fixture(scope="module")
def head(target):  # noqa: F811
    return trained_eagle(target)


def sized(target, head, costs: CostCurve, level_seconds: float = 0.001) -> EagleDrafter:  # noqa: F811
    spec = TreeSpec(top_k=3, depth=4, total_tokens=16, costs=costs, level_seconds=level_seconds)
    return EagleDrafter(head, target.get_output_embeddings().weight, None, spec)


def test_a_batch_keeps_fewer_nodes_where_verification_grows_with_tokens(target, head):  # noqa: F811
    rising, flat = sized(target, head, RISING), sized(target, head, FLAT)
    alone, batched = rising._best_size(SCORES, rows=1), rising._best_size(SCORES, rows=8)
    assert 1 <= batched < alone < len(SCORES)
    assert flat._best_size(SCORES, rows=1) == flat._best_size(SCORES, rows=8) == len(SCORES)  # more nodes cost nothing


def test_a_batch_stops_levels_earlier_where_verification_grows(target, head):  # noqa: F811
    drafter = sized(target, head, RISING, level_seconds=0.004)
    mass = torch.tensor([0.35, 0.9])  # T(1) = 11.25 ms, T(8) = 20 ms: a level is worth mass x T(rows)
    assert drafter._stop(mass, rows=1).tolist() == [True, False]
    assert drafter._stop(mass * 0 + 0.19, rows=8).tolist() == [True, True]
    assert drafter._stop(mass * 0 + 0.21, rows=8).tolist() == [False, False]


def test_auto_sized_trees_in_a_batch_are_smaller_and_lossless(target, head):  # noqa: F811
    drafter = sized(target, head, RISING)
    alone = [generate(target, p, drafter, Sampling(), 24, set()) for p in PROMPTS]
    together = generate_batch(target, PROMPTS, [drafter.fork() for _ in PROMPTS], Sampling(), 24, set())
    for p, one, batched in zip(PROMPTS, alone, together):
        assert batched.token_ids == one.token_ids == generate(target, p, VanillaDrafter(), Sampling(), 24,
                                                              set()).token_ids
    first_steps = [(one.tree_sizes[1], batched.tree_sizes[1]) for one, batched in zip(alone, together)]
    assert all(b <= a for a, b in first_steps) and any(b < a for a, b in first_steps), first_steps
    assert max(a for g in alone for a in g.accept_lengths) >= 3  # drafts accepted at depth >= 2
    assert max(a for g in together for a in g.accept_lengths) >= 2  # and the batch's smaller trees accepted


@pytest.mark.parametrize("fixed_shapes", [False, True])
def test_costs_are_measured_on_the_runs_runner_and_leave_drafting_as_it_was(target, head, fixed_shapes):  # noqa: F811
    """The verification curve and a tree level's time are measured as the run runs them, on the target's runner
    and the head's cache beside it (with fixed shapes: padded, replayed from graphs on CUDA); a drafter that drafts
    after it (in the row the measurement wrote) fills its own context when it begins and drafts what it drafts
    without it."""
    runner = ModelRunner(target, fixed_shapes=fixed_shapes)
    curve = measure_cost_model(runner, "tiny", rounds=1).verify
    assert curve.sizes == SIZES_MEASURED and all(0 < t < 1 for t in curve.seconds)
    assert runner.cache is not None and runner.capacity >= CONTEXT
    growing = sized(target, head, RISING)
    drafter = beside(growing, runner)
    assert 0 < measure_level_seconds(drafter.head, 3, drafter.cache, repeats=2) < 1
    for p in PROMPTS:
        out = generate(target, p, drafter, Sampling(), 24, set(), runner=runner)
        reference = generate(target, p, growing, Sampling(), 24, set())
        assert out.token_ids == reference.token_ids and out.accept_lengths == reference.accept_lengths


@dataclass(frozen=True)
class Recording(SyntheticAcceptance):
    chains: list[bool] = field(default_factory=list)  # per verified draft: a chain

    def __call__(self, draft, logits, sampling, generator):
        self.chains.append(draft.is_chain())
        return super().__call__(draft, logits, sampling, generator)


def test_under_synthetic_acceptance_a_random_head_sizes_its_tree_from_the_rates():
    """TIMING ONLY: a head that is sure of nothing (uniform draft logits, as a random head at a large vocabulary nearly
    is: root mass k/V), sized from its own confidence, drafts one node a step and the synthetic verifier can accept
    at most one token; sized from the run's rates (the search scores the head's first-ranked child at each depth by
    that depth's rate, tree_search.calibrated) its tree is the best path, as deep as the rates pay for at these
    costs (n = 3: E = 1 + .8 + .48 + .192 over drafting + T(4)), and accepted that deep."""
    target = tiny_llama(256, seed=31, layers=2, hidden=32)  # noqa: F811 (a vocabulary of 256: root mass 3/256)
    head = random_head(target, seed=2)
    unsure = torch.zeros_like(target.get_output_embeddings().weight)
    rates = Recording((0.8, 0.6, 0.4))

    def own_confidence(draft, logits, sampling, generator):  # the same rule, its rates not declared to the drafters
        return rates(draft, logits, sampling, generator)

    runs = {}
    for name, verify in (("rates", rates), ("confidence", own_confidence)):
        spec = TreeSpec(top_k=3, depth=4, total_tokens=16, costs=RISING, level_seconds=0.004)
        drafter = EagleDrafter(head, unsure, None, spec)
        runs[name] = generate(target, PROMPTS[0], drafter, Sampling(), 60, set(), torch.Generator().manual_seed(1),
                              verify)
    assert set(runs["confidence"].tree_sizes[1:-1]) == {1}, runs["confidence"].tree_sizes
    out = runs["rates"]
    left = [60 - sum(out.accept_lengths[:i]) for i in range(len(out.accept_lengths))]  # the budget before each step
    assert out.tree_sizes[1:] == [min(3, n - 1) for n in left[1:]], out.tree_sizes
    assert all(rates.chains), "the tree is the best path alone: nothing off it can be accepted"
    assert max(runs["rates"].accept_lengths) == 4 and max(runs["confidence"].accept_lengths) == 2
