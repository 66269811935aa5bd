"""Feature heads' caches (methods/common/head_cache.py): EAGLE-1/2/3's head keeps a slot cache of its own beside the
target's runner, each row's slot s at its position s, tree levels after the context. At fixed shapes every forward
is padded to a bucketed shape (captured on CUDA; here, on the CPU, the same code uncaptured): the head must draft
exactly what it drafts at its own shapes (T=0: tokens and accept lengths), draft a batch's rows together exactly as
each alone with one head forward per tree level for all of them, and sample vanilla's distribution at T>0
(test_fixed_shapes.py runs EAGLE's distribution case at fixed shapes)."""
from __future__ import annotations

import copy

import pytest
import torch

from specbench.decode.draft import parse_tree
from specbench.decode.engine import generate, generate_batch
from specbench.decode.runner import ModelRunner
from specbench.decode.sampling import Sampling
from specbench.methods.common.feature_tree import FeatureTreeDrafter, TreeSpec
from specbench.methods.eagle import EAGLE1_TREE
from specbench.methods.eagle.drafter import EagleDrafter
from specbench.methods.eagle.head import EagleHead
from specbench.methods.eagle3.drafter import Eagle3FeatureHead
from specbench.methods.hydra.drafter import HydraDrafter
from specbench.methods.medusa.drafter import MedusaDrafter
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.run.decoder import capture_report
from tests.drafters import fitted_eagle_head
from tests.test_distribution import hydra_drafter, medusa_drafter
from tests.test_eagle3 import VOCAB, target, trained_head  # noqa: F401 (fixture)
from tests.test_eagle3 import drafter as eagle3_drafter

HEADS = ["eagle", "eagle1", "eagle3"]
GEN = torch.Generator().manual_seed(0)
TRAIN = [torch.randint(0, VOCAB, (4,), generator=GEN).tolist() for _ in range(16)]
PROMPTS = [torch.randint(0, VOCAB, (n,), generator=GEN).tolist() for n in (6, 2, 8, 1)]


def beside(drafter: FeatureTreeDrafter, runner: ModelRunner) -> FeatureTreeDrafter:
    """The drafter's head and tree (the same weights) drafting beside this target runner, as a run builds it."""
    return FeatureTreeDrafter(drafter.head, copy.deepcopy(drafter.tree), runner)


def trained_eagle(target) -> EagleHead:
    """An EAGLE head trained for a moment on the target's greedy continuations of the training prompts."""
    tokens = torch.tensor([p + generate(target, p, VanillaDrafter(), Sampling(), 24, set()).token_ids for p in TRAIN])
    return fitted_eagle_head(target, tokens, steps=200, lr=0.01, seed=4)


@pytest.fixture(scope="module")
def built(target):
    eagle = trained_eagle(target)
    lm_head = target.get_output_embeddings().weight
    return {"eagle": EagleDrafter(eagle, lm_head, None, TreeSpec(top_k=3, depth=4, total_tokens=10)),
            "eagle1": EagleDrafter(eagle, lm_head, None, TreeSpec(static_paths=parse_tree(EAGLE1_TREE))),
            "eagle3": eagle3_drafter(target, trained_head(target, TRAIN, list(range(2, VOCAB))))}


@pytest.mark.parametrize("name", HEADS)
def test_a_fixed_shapes_head_drafts_what_an_own_shapes_head_drafts(target, built, name):
    own_runner, fixed_runner = ModelRunner(target, fixed_shapes=False), ModelRunner(target, fixed_shapes=True)
    own, fixed = beside(built[name], own_runner), beside(built[name], fixed_runner)
    deep = drafted = 0
    for base in PROMPTS + TRAIN[:4]:
        reference = generate(target, base, VanillaDrafter(), Sampling(), 24, set()).token_ids
        dynamic = generate(target, base, own, Sampling(), 24, set(), runner=own_runner)
        out = generate(target, base, fixed, Sampling(), 24, set(), runner=fixed_runner)
        assert out.token_ids == dynamic.token_ids == reference, base
        assert out.accept_lengths == dynamic.accept_lengths, base
        deep += sum(a >= 3 for a in out.accept_lengths)
        drafted += sum(out.tree_sizes)
    assert drafted > 0 and deep >= 3, f"{drafted} nodes drafted, {deep} steps accepted two or more"
    assert fixed.cache.runner.fixed_shapes and len(fixed.cache.runner.cache.layers) == 1


@pytest.mark.parametrize("name", ["eagle", "eagle1"])
def test_a_batch_drafts_one_head_forward_per_level_as_each_row_alone(target, built, name):
    runner = ModelRunner(target, fixed_shapes=True)
    drafter = beside(built[name], runner)
    alone = [generate(target, p, drafter, Sampling(), 24, {7}, runner=runner) for p in PROMPTS]
    forwards: list[int] = []
    forward = drafter.cache.forward
    drafter.cache.forward = lambda tokens, *rest: forwards.append(tokens.shape[0]) or forward(tokens, *rest)
    together = generate_batch(target, PROMPTS, [drafter.fork() for _ in PROMPTS], Sampling(), 24, {7},
                              runner=runner)
    for one, batched in zip(alone, together):
        assert batched.token_ids == one.token_ids
        assert batched.accept_lengths == one.accept_lengths
    assert max(a for g in together for a in g.accept_lengths) >= 3  # drafts accepted at depth >= 2
    levels = drafter.tree.depth if drafter.tree.static_paths is None else max(map(len, drafter.tree.static_paths))
    assert forwards[: levels] == [len(PROMPTS)] * levels  # the first step: a fill, then each level, every row in each
    assert len(forwards) <= levels * max(len(g.accept_lengths) for g in together)  # never one forward per row


def test_rows_that_leave_move_up_and_draft_as_each_row_alone(target, built):
    """Rows finishing at different steps (EOS) move the rows after them up, slots and all."""
    runner = ModelRunner(target, fixed_shapes=True)
    drafter = beside(built["eagle"], runner)
    alone = [generate(target, p, copy.deepcopy(built["eagle"]), Sampling(), 24, {7, 11}) for p in PROMPTS]
    together = generate_batch(target, PROMPTS, [drafter.fork() for _ in PROMPTS], Sampling(), 24, {7, 11},
                              runner=runner)
    assert len({len(g.accept_lengths) for g in together}) > 1, "every row finished at the same step"
    for one, batched in zip(alone, together):
        assert batched.token_ids == one.token_ids and batched.accept_lengths == one.accept_lengths


def test_a_drafter_that_begins_fills_its_whole_context_whatever_its_row_held(target, built):
    """The head cache's rows are written over with noise before every generation: a drafter that begins a sequence
    fills its context from the start and drafts what it drafts on a cache of its own."""
    runner = ModelRunner(target, fixed_shapes=True)
    drafter = beside(built["eagle"], runner)
    for p in PROMPTS + TRAIN[:2]:
        cache = drafter.cache.runner.cache
        if cache is not None and cache.keys is not None:
            with torch.inference_mode():
                cache.keys.normal_(), cache.values.normal_()
        reference = generate(target, p, copy.deepcopy(built["eagle"]), Sampling(), 24, set())
        out = generate(target, p, drafter, Sampling(), 24, set(), runner=runner)
        assert out.token_ids == reference.token_ids and out.accept_lengths == reference.accept_lengths


def test_a_fixed_shapes_head_cache_that_grows_keeps_what_it_held(target, built):
    drafter = beside(built["eagle"], ModelRunner(target, fixed_shapes=True))
    head = drafter.cache
    features = torch.randn(2, 5, drafter.head.feature_size)
    tokens = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    with torch.inference_mode():
        head.fill(tokens, features, torch.tensor([0, 3]), 3, None)
        cache = head.runner.cache
        before, version = cache.keys[:, :2, :, :8].clone(), cache.version
        head.runner.reserve(9, cache.capacity + 1)
    assert cache.rows == 16 and cache.capacity == 1024 and cache.version > version  # bucketed, rounded up
    assert torch.equal(cache.keys[:, :2, :, :8], before)


def test_a_failed_head_capture_is_reported_and_drafting_goes_on_uncaptured(target, built):
    """No CUDA here: asking for capture fails at the first head forward, is counted once with the target's, and the
    drafter goes on uncaptured, drafting as before."""
    runner = ModelRunner(target, fixed_shapes=True)
    drafter = beside(built["eagle"], runner)
    graphs = drafter.cache.runner.graphs
    graphs.capture = True  # the target runs uncaptured; only the head tries
    reference = generate(target, PROMPTS[0], copy.deepcopy(built["eagle"]), Sampling(), 16, set())
    with pytest.warns(UserWarning, match="CUDA graph capture failed"):
        out = generate(target, PROMPTS[0], drafter, Sampling(), 16, set(), runner=runner)
    assert out.token_ids == reference.token_ids and out.accept_lengths == reference.accept_lengths
    assert not graphs.capture and graphs.stats.uncaptured
    assert runner.drafting == [graphs] and capture_report(runner).uncaptured == graphs.stats.uncaptured


@pytest.mark.parametrize("name", ["medusa", "hydra"])
def test_medusa_and_hydra_draft_a_padded_batch_as_each_row_alone(target, name):
    """Medusa's and Hydra's drafting is one function of the rows' last features (and tokens), run padded to the
    bucketed row count at fixed shapes (captured on CUDA): three rows, padded to four, draft as each alone at its own
    shapes."""
    build = medusa_drafter if name == "medusa" else hydra_drafter
    growing = build(target, TRAIN[0])
    runner = ModelRunner(target, fixed_shapes=True)
    fixed = build(target, TRAIN[0], runner)  # the same seeded heads, drafting beside the fixed-shapes runner
    prompts = PROMPTS[:3]
    alone = [generate(target, p, growing, Sampling(), 24, set()) for p in prompts]
    together = generate_batch(target, prompts, [fixed.fork() for _ in prompts], Sampling(), 24, set(), runner=runner)
    for p, one, batched in zip(prompts, alone, together):
        assert batched.token_ids == one.token_ids == generate(target, p, VanillaDrafter(), Sampling(), 24,
                                                              set()).token_ids
        assert batched.accept_lengths == one.accept_lengths
    assert max(a for g in together for a in g.accept_lengths) >= 3  # drafts accepted at depth >= 2


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here (capture is CUDA-only)")


def cuda_drafter(name: str, model, built, runner: ModelRunner):
    """The test's drafter of this name with its weights on the model's device, drafting beside `runner`."""
    lm_head = model.get_output_embeddings().weight
    if name in ("eagle", "eagle1"):
        head = copy.deepcopy(built[name].head.head).to(model.device)
        return EagleDrafter(head, lm_head, None, built[name].tree, target=runner)
    if name == "eagle3":
        head = copy.deepcopy(built[name].head.head).to(model.device)
        return FeatureTreeDrafter(Eagle3FeatureHead(head, model.config.num_hidden_layers), built[name].tree, runner)
    cpu = built[name]
    heads = copy.deepcopy(cpu.heads).to(model.device)
    if name == "medusa":
        return MedusaDrafter(heads, lm_head, None, cpu.tree, graphs=runner.drafting_graphs())
    return HydraDrafter(heads, model.get_input_embeddings(), lm_head, None, cpu.tree, graphs=runner.drafting_graphs())


@CUDA
@pytest.mark.parametrize("name", HEADS + ["medusa", "hydra"])
def test_captured_drafting_drafts_what_it_drafts_uncaptured(target, built, name):
    """On CUDA at fixed shapes, every drafting forward replayed from its graph (the target's too): the same tokens
    and accept lengths as the same shapes uncaptured, alone and in a batch of three (padded to four)."""
    if name in ("medusa", "hydra"):
        built = {name: (medusa_drafter if name == "medusa" else hydra_drafter)(target, TRAIN[0])}
    model = copy.deepcopy(target).to("cuda")
    outputs = {}
    for capture in (False, True):
        runner = ModelRunner(model, fixed_shapes=True)
        drafter = cuda_drafter(name, model, built, runner)
        for graphs in [runner.graphs, *runner.drafting]:
            graphs.capture = capture  # the same fixed shapes, replayed from graphs or run directly
        alone = [generate(model, p, drafter, Sampling(), 24, set(), runner=runner) for p in PROMPTS]
        together = generate_batch(model, PROMPTS[:3], [drafter.fork() for _ in PROMPTS[:3]], Sampling(), 24, set(),
                                  runner=runner)
        outputs[capture] = [(g.token_ids, g.accept_lengths) for g in alone + together]
        if capture:
            assert runner.drafting and all(g.capture and g.stats.captures > 0 for g in runner.drafting), \
                capture_report(runner).line()
    assert outputs[True] == outputs[False]
    assert max(a for _, lengths in outputs[True] for a in lengths) >= 3  # drafts accepted at depth >= 2
