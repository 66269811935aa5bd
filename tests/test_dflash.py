"""DFlash: a small draft conditioned on target layers' states fills a block of masks in one non-causal forward.
Training's blocks see what inference feeds; T=0 output is vanilla's with drafts accepted at depth >= 2 (a tiny draft
trained here on the target's own greedy text), on both shape policies, with one draft forward a step; a batch's rows
draft together exactly as each alone (T>0: test_distribution's dflash case); `train dflash` writes a
checkpoint that loads and drafts; a shape target drafts with a random draft; a missing checkpoint is one error."""
from __future__ import annotations

import json

import pytest
import torch

from specbench.cli import main
from specbench.decode.engine import generate, generate_batch
from specbench.decode.runner import ModelRunner
from specbench.decode.sampling import Sampling
from specbench.decode.target import chat_tokens, load_model
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.common.target_layers import fused_layers
from specbench.methods.dflash.drafter import DFlashDrafter
from specbench.methods.dflash.model import DFlashDraft, dflash_config
from specbench.methods.dflash.training import DFlashTrainable, anchors, block_mask
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.run.registry import available_methods
from specbench.train.features import FeatureCache
from specbench.train.training import Batch, load_conversations, make_batch
from tests.conftest import tiny_llama, write_prompts
from tests.test_overhead import needs_default_tokenizer

VOCAB = 64
PROMPTS = [[3, 9, 14, 2], [1, 2, 3], [20, 21, 5, 5, 7, 9, 9, 30, 31, 8, 2]]


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, seed=3, layers=2, hidden=32, logit_scale=4.0)


def features_batch(target, texts: list[list[int]]) -> Batch:
    """A training batch of these token sequences with the target's states (final and fused layers), as the
    feature cache holds them; every position trained."""
    n = max(map(len, texts))
    tokens = torch.tensor([t + [0] * (n - len(t)) for t in texts])
    valid = torch.tensor([[i < len(t) for i in range(n)] for t in texts])
    layers = fused_layers(target.config.num_hidden_layers)
    with torch.no_grad():
        states = target(tokens, output_hidden_states=True).hidden_states
    return Batch(tokens, states[-1], valid, valid, torch.cat([states[i] for i in layers], -1), layers)


def trained_draft(target, texts: list[list[int]], block: int, steps: int) -> DFlashDraft:
    """A 1-layer draft after `steps` Adam steps of DFlashTrainable's loss on the texts."""
    torch.manual_seed(0)
    layers = fused_layers(target.config.num_hidden_layers)
    draft = DFlashDraft(dflash_config(target.config, 1, block, layers)).share(target)
    trainable, batch = DFlashTrainable(draft, block, 4.0), features_batch(target, texts)
    optimizer = torch.optim.Adam(draft.parameters(), lr=0.01)
    for _ in range(steps):
        loss, _ = trainable.loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return draft.eval()


@pytest.fixture(scope="module")
def draft(target):
    """Blocks of 4, trained for 300 steps on the target's greedy continuations of PROMPTS (the text it then drafts)."""
    return trained_draft(target, [p + generate(target, p, VanillaDrafter(), Sampling(), 40, set()).token_ids
                                  for p in PROMPTS], 4, 300)


def drafter(draft: DFlashDraft, runner: ModelRunner, block: int = 4) -> DFlashDrafter:
    return DFlashDrafter(draft, block, runner.drafter_runner(draft))


def test_a_training_block_is_the_inference_forward_at_its_anchor(target):
    """Each anchor's block in the training layout equals a forward over the context before it and that block alone."""
    torch.manual_seed(1)
    draft = DFlashDraft(dflash_config(target.config, 2, 4, fused_layers(2))).share(target).eval()
    batch = features_batch(target, [list(range(5, 17)), list(range(30, 39))])
    at, real = anchors(batch.loss_mask, batch.valid, 4, torch.Generator().manual_seed(0))
    mask, positions = block_mask(at, batch.valid, 4, torch.float32)
    rows, count = at.shape
    roots = batch.tokens.gather(1, at).flatten()
    with torch.no_grad():
        context = draft.context(batch.fused)
        trained = draft.hidden_states(draft.block_inputs(roots, 4).view(rows, count * 4, -1), context, positions, mask)
        checked = 0
        for r in range(rows):
            for j in range(count):
                if not real[r, j]:
                    continue
                a = int(at[r, j])
                alone = draft.hidden_states(draft.block_inputs(batch.tokens[r, a : a + 1], 4), context[r : r + 1, :a],
                                            torch.arange(a + 4)[None], torch.zeros(1, 1, 4, a + 4))
                assert torch.allclose(trained[r, j * 4 : j * 4 + 4], alone[0], atol=1e-5)
                checked += 1
    assert checked == int(real.sum()) >= 6


@pytest.mark.parametrize("fixed_shapes", [False, True])
def test_t0_is_vanillas_output_with_deep_accepts(target, draft, fixed_shapes):
    deep = forwards = steps = 0
    for p in PROMPTS:
        expected = generate(target, p, VanillaDrafter(), Sampling(), 40, set()).token_ids
        runner = ModelRunner(target, fixed_shapes)
        mine = drafter(draft, runner)
        draft_runner = mine.runner
        calls = []
        draft_runner.forward = lambda *a, _f=draft_runner.forward: calls.append(1) or _f(*a)  # count draft forwards
        out = generate(target, p, mine, Sampling(), 40, set(), runner=runner)
        assert out.token_ids == expected
        deep += sum(a >= 3 for a in out.accept_lengths)  # two draft tokens or more accepted
        forwards, steps = forwards + len(calls), steps + len(out.accept_lengths)
    print(f"dflash: {deep} steps accepted at depth >= 2 of {steps}")
    assert deep >= 10  # 28 of 37 when written
    assert forwards == steps - len(PROMPTS)  # one draft forward a step, none before the prompt's prefill


@pytest.mark.parametrize("fixed_shapes", [False, True])
def test_a_batch_of_three_drafts_as_each_alone(target, draft, fixed_shapes):
    alone = [generate(target, p, drafter(draft, ModelRunner(target, fixed_shapes)), Sampling(), 30, set(),
                      runner=ModelRunner(target, fixed_shapes)) for p in PROMPTS]
    runner = ModelRunner(target, fixed_shapes)
    first = drafter(draft, runner)
    rows = [first] + [first.fork() for _ in PROMPTS[1:]]  # one cache: every row in one draft forward
    together = generate_batch(target, PROMPTS, rows, Sampling(), 30, set(), runner=runner)
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert [g.accept_lengths for g in together] == [g.accept_lengths for g in alone]


def distribution_drafter(target, prompt: list[int], sampling: Sampling, runner: ModelRunner) -> DFlashDrafter:
    """test_distribution's dflash case: blocks of 4 from a draft trained for a moment (150 steps) on 48 of the
    target's samples after the prompt, so that its deterministic candidates are accepted deep often enough to have
    power."""
    generator = torch.Generator().manual_seed(7)
    texts = [prompt + generate(target, prompt, VanillaDrafter(), sampling, 8, set(), generator).token_ids
             for _ in range(48)]
    return drafter(trained_draft(target, texts, 4, 150), runner)


@pytest.fixture(scope="module")
def trained(tiny_target_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("dflash_train")
    prompts = write_prompts(folder / "prompts.jsonl", [f"tell me {i} things about the lazy dog" for i in range(24)])
    out = folder / "dflash"
    code = main(["train", "dflash", "--target", str(tiny_target_dir), "--data", str(prompts), "--mode", "self",
                 "--prompts", "24", "--features", str(folder / "features"), "--out", str(out), "--max-tokens", "300000",
                 "--batch-tokens", "1024", "--lr", "1e-2", "--opt", "block=4"])
    assert code == 0
    return out


def test_train_dflash_writes_a_checkpoint_that_loads_and_drafts(tiny_target_dir, trained):
    """The checkpoint loads as `dflash`'s drafter, predicts the target's next token on a training conversation as it
    learned to (the loss's own top-1), and drafts every step after the prefill, verified to vanilla's output. (Its
    acceptance on fresh prompts is not asserted here: this tiny target's re-tokenised replies are not its greedy
    text; test_t0_is_vanillas_output_with_deep_accepts asserts deep accepts on a draft trained on greedy text.)"""
    config = json.loads((trained / "config.json").read_text())
    assert config["dflash_block_size"] == 4 and config["num_hidden_layers"] == 1
    target = load_model(str(tiny_target_dir))
    made = available_methods()["dflash"].drafter(BuildContext(target, draft=str(trained)))
    assert isinstance(made, DFlashDrafter) and made.block_size == 4
    convs = load_conversations(FeatureCache(trained.parent / "features"))
    with torch.no_grad():
        _, metrics = DFlashTrainable(made.model, 4, 4.0).loss(make_batch(convs, [3]))
    print(f"dflash: top-1 {metrics['top1']:.2f} on a training conversation")
    assert metrics["top1"] > 0.3  # 0.68 when written (an untrained draft: about 1/300)
    prompt = chat_tokens(target.tokenizer, [{"role": "user", "content": "tell me 3 things about the lazy dog"}])
    out = generate(target.model, prompt, made, Sampling(), 30, set())
    assert out.token_ids == generate(target.model, prompt, VanillaDrafter(), Sampling(), 30, set()).token_ids
    # Nothing drafted before the prefill, then block - 1 drafts verified every step (fewer near the token budget,
    # none for the last token).
    assert out.tree_sizes[0] == 0 and out.tree_sizes[1] == 3 and all(out.tree_sizes[1:-1])


def test_without_a_checkpoint_dflash_says_how_to_train_one(tiny_target_dir, tmp_path):
    target = load_model(str(tiny_target_dir))
    with pytest.raises(SpecbenchError, match="train dflash"):
        available_methods()["dflash"].drafter(BuildContext(target))
    (tmp_path / "config.json").write_text(json.dumps({"specbench_shared_embedding": True}))  # an sps draft
    with pytest.raises(SpecbenchError, match="not a DFlash draft"):
        available_methods()["dflash"].drafter(BuildContext(target, draft=str(tmp_path)))


@needs_default_tokenizer
def test_a_shape_target_drafts_with_a_random_draft():
    target = load_model("shape:tiny-llama")
    made = available_methods()["dflash"].drafter(BuildContext(target))
    assert isinstance(made, DFlashDrafter) and "TIMING-ONLY" in made.trained_from
    out = generate(target.model, [1, 2, 3], made, Sampling(), 8, set())
    assert out.token_ids == generate(target.model, [1, 2, 3], VanillaDrafter(), Sampling(), 8, set()).token_ids
