"""The inductor kernels (`--kernels inductor`: the target's forward through torch.compile, its runner's
`compiled`, specbench.decode.runner) on the CPU, at fixed shapes (the GPU's path, uncaptured here) and at its own:
at T=0 (fp32) every lossless method emits exactly what vanilla emits on the same compiled target, its drafts
accepted at depth 2 or more; a second pass over the same prompts, and prompts of new lengths (longer than the
largest bucket: their prefills run uncompiled), compile nothing new (a recompile per step would make the runtime
slower than stock, and past torch's recompile limit it runs uncompiled)."""
from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from specbench.decode.draft import parse_tree
from specbench.decode.engine import generate
from specbench.decode.names import Runtime
from specbench.decode.runner import RECOMPILE_LIMIT, ModelRunner
from specbench.decode.runtime import FewTokenLinear
from specbench.decode.sampling import Sampling
from specbench.decode.target import load_model
from specbench.methods.common.feature_tree import TreeSpec
from specbench.methods.eagle import EAGLE1_TREE
from specbench.methods.eagle.drafter import EagleDrafter
from specbench.methods.vanilla.drafter import VanillaDrafter
from tests.test_batch_drafting import head  # noqa: F401 (fixture: an EAGLE head fitted to the target)
from tests.test_distribution import LOSSLESS, draft_model, prompt, target  # noqa: F401 (fixtures)

PROMPTS = [[3, 7, 1, 5, 2, 2], [9, 4], [1, 2, 3, 1, 2, 3, 1, 2]]
# The methods whose drafts these prompts accept at depth 2 or more on the tiny target (all measured: 3 to 32 such
# steps when written); the random EAGLE-family heads and pard's random draft accept one token at most there (checked
# for identity; EAGLE's fitted head below is accepted deep).
SHALLOW = ["vanilla", "random trees", "eagle (dynamic tree)", "eagle1 (static tree)", "eagle-hass (eagle's drafter)",
           "pard (K tokens from one forward, mask id 11)", "eagle3 (reduced draft vocabulary)"]


def compiled_graphs() -> int:
    """Graphs dynamo has compiled in this process so far."""
    return counters["stats"]["unique_graphs"]


def test_the_runtime_compiles_the_targets_runner_and_leaves_the_model_as_transformers_built_it(tiny_target_dir):
    loaded = load_model(str(tiny_target_dir), runtime=Runtime("inductor", "on"))
    info, model, runner = loaded.runtime, loaded.model, loaded.runner
    assert (info.name, info.compiled, info.fixed_shapes, info.swapped_linears) == ("inductor+graphs", True, True, 0)
    assert not any(isinstance(m, FewTokenLinear) for m in model.modules())
    plain, decoding = runner.built
    assert runner.compiled and plain.model is model and decoding.model._orig_mod is model
    assert not load_model(str(tiny_target_dir), runtime=Runtime("stock", "on")).runner.compiled
    # transformers' forwards share one wrapper, whose compiled graphs torch counts together (hf-compiled's too)
    assert torch._dynamo.config.recompile_limit >= RECOMPILE_LIMIT


@pytest.mark.parametrize("fixed_shapes", [True, False], ids=["fixed shapes", "own shapes"])
def test_every_lossless_method_emits_vanillas_tokens_on_the_compiled_target(target, draft_model, prompt, head,
                                                                             fixed_shapes):
    bases = PROMPTS + [prompt]
    runner = ModelRunner(target, fixed_shapes=fixed_shapes, compiled=True)
    reference = [generate(target, base, VanillaDrafter(), Sampling(), 24, set(), runner=runner).token_ids
                 for base in bases]
    fitted = {f"eagle, fitted head ({kind})": lambda t, d, p, r, paths=paths: EagleDrafter(
        head, t.get_output_embeddings().weight, None, TreeSpec(3, 3, 8, static_paths=paths), target=r)
        for kind, paths in (("dynamic tree", None), ("static tree", parse_tree(EAGLE1_TREE)))}
    builds = {**{name: case.build for name, case in LOSSLESS.items()}, **fitted}
    for name, build in builds.items():
        drafter = build(target, draft_model, prompt, runner)
        outputs = [generate(target, base, drafter, Sampling(), 24, set(), runner=runner) for base in bases]
        assert [out.token_ids for out in outputs] == reference, name
        deep = sum(a >= 3 for out in outputs for a in out.accept_lengths)
        assert deep > 0 or name in SHALLOW, f"{name}: no draft accepted at depth 2 or more"
    graphs = compiled_graphs()
    longer = [(prompt * 40)[:n] for n in (70, 90)]  # prefills past the largest bucket: run uncompiled
    for base in bases + longer:
        emitted = [generate(target, base, build(target, draft_model, prompt, runner), Sampling(), 24, set(),
                            runner=runner).token_ids
                   for build in (lambda *_: VanillaDrafter(), builds["eagle, fitted head (dynamic tree)"])]
        assert emitted[0] == emitted[1]
    assert compiled_graphs() == graphs, "a second pass (and prompts of new lengths) compiled again"
