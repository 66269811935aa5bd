"""Fixed shapes (`--graphs on`: ModelRunner(fixed_shapes=True), specbench.decode.runner) on the CPU, where
they run padded and uncaptured: the same code as on CUDA but for the graph replay. Every lossless method emits
exactly what it emits at its own shapes (fixed_shapes=False) at T=0 (fp32), samples vanilla's distribution at T>0
with the distribution tests' power floors, and decodes a batch of four as it decodes each row alone."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from specbench.decode.engine import generate, generate_batch
from specbench.decode.names import Runtime
from specbench.decode.runner import BLOCK_SIZES, ModelRunner, bucket
from specbench.decode.sampling import Sampling
from specbench.decode.target import load_model
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.run.decoder import capture_report
from tests.conftest import tiny_llama
from tests.drafters import RandomTreeDrafter
from tests.test_distribution import (  # noqa: F401 (fixtures)
    LOSSLESS,
    assert_lossless,
    draft_model,
    exact_joint,
    prompt,
    sample_method,
    target,
)

PROMPTS = [[3, 7, 1, 5, 2, 2], [9, 4], [1, 2, 3, 1, 2, 3, 1, 2]]


def test_bucket_pads_to_the_next_size_and_runs_past_the_largest_as_is():
    assert [bucket(n, BLOCK_SIZES) for n in (1, 3, 9, 64, 65)] == [1, 4, 16, 64, 65]


@pytest.mark.parametrize("name", list(LOSSLESS))
def test_fixed_shapes_emit_what_own_shapes_emit_at_t0(target, draft_model, prompt, name):
    """Each shape policy its own runner and its own drafter built beside it (the same seeded weights)."""
    outputs, drafted = {}, 0
    for fixed_shapes in (False, True):
        runner = ModelRunner(target, fixed_shapes=fixed_shapes)
        drafter = LOSSLESS[name].build(target, draft_model, prompt, runner)
        outputs[fixed_shapes] = [generate(target, base, drafter, Sampling(), 24, set(), runner=runner)
                                 for base in PROMPTS + [prompt]]
    for base, own, fixed in zip(PROMPTS + [prompt], outputs[False], outputs[True]):
        assert fixed.token_ids == own.token_ids, base
        assert fixed.accept_lengths == own.accept_lengths, base
        drafted += sum(fixed.tree_sizes)
    if LOSSLESS[name].min_deep:  # a drafting method: its drafts were verified at fixed shapes
        assert drafted > 0, "nothing was drafted"


def test_fixed_shapes_accept_deep_trees_with_gaps_as_vanilla_emits(target, prompt):
    """Trees that hide vanilla's continuation on a random branch: long accepted paths through non-first children,
    so the compaction of the padded forward's slots moves them across gaps."""
    runner = ModelRunner(target, fixed_shapes=True)
    deep = 0
    for seed, base in enumerate(PROMPTS + [prompt]):
        reference = generate(target, base, VanillaDrafter(), Sampling(), 24, set()).token_ids
        fixed = generate(target, base, RandomTreeDrafter(12, seed, reference), Sampling(), 24, set(), runner=runner)
        assert fixed.token_ids == reference
        deep += sum(a >= 3 for a in fixed.accept_lengths)
    assert deep >= 8, f"only {deep} steps accepted two draft tokens or more"


# At T>0 fixed shapes change only the forwards' shapes (pads, the whole-capacity mask) of the target and of a
# drafter's cache beside it; the walks are the same, tested for every method in test_distribution.py. Here EAGLE's
# feature tree at fixed shapes, its head's cache too (deep accepts through the padded forward's hidden states).
# SPECBENCH_FIXED_SHAPES_SAMPLED="all" (or case names separated by ";") runs other cases of LOSSLESS (each is 2,500
# generations).
CHOSEN = os.environ.get("SPECBENCH_FIXED_SHAPES_SAMPLED", "eagle (dynamic tree)")
SAMPLED = list(LOSSLESS) if CHOSEN == "all" else CHOSEN.split(";")


@pytest.mark.parametrize("name", SAMPLED)
def test_fixed_shapes_sample_vanillas_joint(target, draft_model, prompt, exact_joint, name):
    case, runner = LOSSLESS[name], ModelRunner(target, fixed_shapes=True)
    assert_lossless(case, sample_method(target, prompt, case.build(target, draft_model, prompt, runner), runner=runner),
                    exact_joint)


def test_fixed_shapes_batch_of_four_equals_each_row_alone():
    model = tiny_llama(64, seed=3, layers=2, hidden=32).eval()
    runner = ModelRunner(model, fixed_shapes=True)
    prompts = [[3, 9, 14, 2], [1, 2, 3], [20, 21, 5, 5, 7, 9, 9], [4]]
    refs = [generate(model, p, VanillaDrafter(), Sampling(), 30, set()).token_ids for p in prompts]
    alone = [generate(model, p, RandomTreeDrafter(64, i, r), Sampling(), 30, {7}, runner=runner)
             for i, (p, r) in enumerate(zip(prompts, refs))]
    version = runner.cache.version
    together = generate_batch(model, prompts, [RandomTreeDrafter(64, i, r) for i, (p, r) in enumerate(zip(prompts, refs))],
                              Sampling(), 30, {7}, runner=runner)
    for one, batched, ref in zip(alone, together, refs):
        assert batched.token_ids == one.token_ids == (ref[: ref.index(7) + 1] if 7 in ref else ref)
        assert batched.accept_lengths == one.accept_lengths
    assert max(a for g in together for a in g.accept_lengths) >= 3  # trees accepted deep, compaction with gaps
    assert runner.cache.rows == 4 and runner.cache.version == version + 1  # the run's cache, grown once for 4 rows


def test_fixed_shapes_cache_is_kept_across_generations_and_grows_when_needed():
    model = tiny_llama(64, seed=3, layers=2, hidden=32).eval()
    runner = ModelRunner(model, fixed_shapes=True)
    generate(model, [1, 2, 3], VanillaDrafter(), Sampling(), 8, set(), runner=runner)
    first, version = runner.cache, runner.cache.version
    generate(model, [4, 5], VanillaDrafter(), Sampling(), 8, set(), runner=runner)
    assert runner.cache is first and runner.cache.version == version  # the storage did not move
    long = list(np.arange(600) % 60)
    out = generate(model, long, VanillaDrafter(), Sampling(), 8, set(), runner=runner)
    assert runner.cache.version > version and runner.capacity >= 600 + 8
    assert out.token_ids == generate(model, long, VanillaDrafter(), Sampling(), 8, set()).token_ids


def test_graphs_on_the_cpu_run_fixed_shapes_uncaptured_on_either_kernels(tiny_target_dir):
    loaded = load_model(str(tiny_target_dir), "cpu", "float32", Runtime(graphs="on"))
    assert loaded.runner.fixed_shapes and not loaded.runner.capture and not loaded.runtime.captured
    assert loaded.runtime.name == "few-token+graphs" and loaded.runtime.swapped_linears > 0
    stock = load_model(str(tiny_target_dir), "cpu", "float32", Runtime(kernels="stock", graphs="on"))
    assert stock.runner.fixed_shapes and stock.runtime.swapped_linears == 0 and stock.runtime.name == "stock+graphs"
    eager = load_model(str(tiny_target_dir), "cpu", "float32", "eager")  # a single name: stock kernels, graphs off
    assert not eager.runner.fixed_shapes and eager.runtime.swapped_linears == 0
    assert [Runtime.of(name) for name in ("compiled", "fast", "stock")] == [
        Runtime("auto", "on"), Runtime("auto", "off"), Runtime("stock", "off")]
    with torch.inference_mode():
        assert load_model(str(tiny_target_dir), "cpu", "float32").runtime.name == "few-token"  # auto on the CPU


def test_runtime_choices_are_checked_with_one_error_line(tiny_target_dir, tmp_path, capsys):
    from specbench.cli import main

    base = ["run", "--target", str(tiny_target_dir), "--out", str(tmp_path / "r"), "--methods", "vanilla"]
    assert main([*base, "--runtime", "eager", "--kernels", "stock"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--runtime eager names both choices" in err[0], err
    with pytest.raises(ValueError, match="unknown graphs choice"):
        Runtime(graphs="yes")
    assert not (tmp_path / "r").exists()


def test_a_failed_capture_is_reported_once_and_decoding_goes_on_uncaptured():
    """Where a shape cannot be captured (here: no CUDA at all, capture asked for anyway), the runner says why once
    and runs uncaptured."""
    model = tiny_llama(64, seed=3, layers=2, hidden=32).eval()
    runner = ModelRunner(model, fixed_shapes=True)
    runner.graphs.capture = True
    expected = generate(model, [1, 2, 3], VanillaDrafter(), Sampling(), 8, set()).token_ids
    with pytest.warns(UserWarning, match="CUDA graph capture failed"):
        out = generate(model, [1, 2, 3], VanillaDrafter(), Sampling(), 8, set(), runner=runner)
    assert out.token_ids == expected
    assert not runner.graphs.capture and runner.graphs.stats.uncaptured and runner.graphs.stats.captures == 0
    assert capture_report(runner).uncaptured == runner.graphs.stats.uncaptured  # the run's report says why


def test_a_reservation_for_more_rows_keeps_the_capacity_it_had():
    runner = ModelRunner(tiny_llama(64, seed=3, layers=2, hidden=32).eval(), fixed_shapes=True)
    runner.reserve(1, 1500)
    runner.reserve(4, 10)
    assert runner.cache.rows == 4 and runner.capacity >= 1500
