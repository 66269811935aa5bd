"""swift: the target drafts for itself with layers skipped. The view shares the target's weights and leaves the
target whole; at T=0 it emits vanilla's tokens with drafts accepted, alone and four rows at once; at T>0 it samples
vanilla's exact joint. The tiny target's two middle layers add little to the residual stream (as the middle layers
of a trained LLM, which is why skipping them drafts well), so the layer-skipped view agrees with it often."""
from __future__ import annotations

import pytest
import torch
from transformers import Gemma3TextConfig

from specbench.decode.engine import generate, generate_batch
from specbench.decode.sampling import Sampling
from specbench.errors import SpecbenchError
from specbench.methods.common.draft_model import DraftModelDrafter
from specbench.methods.swift.drafter import always_kept, evenly_skipped, layer_skip_view
from specbench.methods.vanilla.drafter import VanillaDrafter
from tests.conftest import tiny_llama
from tests.identity import assert_vanilla_tokens_with_deep_accepts
from tests.stats import goodness_of_fit
from tests.test_distribution import BASE, PASS_P, VOCAB, joint_of, sample_method


def quiet_middle(vocab: int):
    model = tiny_llama(vocab, seed=21, layers=4, hidden=16, logit_scale=26.0)
    with torch.no_grad():
        for layer in model.model.layers[1:3]:
            layer.self_attn.o_proj.weight.mul_(0.15)
            layer.mlp.down_proj.weight.mul_(0.15)
    return model


@pytest.fixture(scope="module")
def target():
    return quiet_middle(32)  # the identity prompts use tokens up to 21


@pytest.fixture(scope="module")
def small_target():
    return quiet_middle(VOCAB)  # the exact joint over VOCAB^4 sequences


def drafter(target, skip=(1, 2), gamma=3) -> DraftModelDrafter:
    return DraftModelDrafter(layer_skip_view(target, list(skip)), gamma, target.config.vocab_size)


def test_the_view_shares_weights_and_leaves_the_target_whole(target):
    ids = torch.tensor([BASE])
    before = target(ids).logits
    view = layer_skip_view(target, [1, 2])
    assert len(view.model.layers) == 2 and len(target.model.layers) == 4
    assert view.model.layers[1] is target.model.layers[3] and view.lm_head is target.lm_head
    assert torch.equal(target(ids).logits, before)
    assert not torch.equal(view(ids, use_cache=False).logits, before)  # it does skip something


def test_t0_identity_with_drafts_accepted(target):
    assert_vanilla_tokens_with_deep_accepts(target, drafter(target))


def test_batch_rows_equal_single_decoding(target):
    prompts = [BASE, BASE[:2], BASE + [9, 2, 4], [2, 9] + BASE]
    one = drafter(target)
    alone = [generate(target, p, one, Sampling(), 30, set()) for p in prompts]
    together = generate_batch(target, prompts, [one] + [one.fork() for _ in prompts[1:]], Sampling(), 30, set())
    for single, batched in zip(alone, together):
        assert batched.token_ids == single.token_ids and batched.accept_lengths == single.accept_lengths
    assert sum(a - 1 for g in together for a in g.accept_lengths) >= 8


def test_t1_samples_vanillas_exact_joint(small_target):
    greedy = generate(small_target, BASE, VanillaDrafter(), Sampling(), 8, set()).token_ids
    prompt = BASE + greedy + BASE
    result = sample_method(small_target, prompt, drafter(small_target))
    # 4977 deep accepts and 2479 full paths when written (p 0.32); floors at about half.
    assert result.deep_accepts >= 2400 and result.full_paths >= 1200
    assert goodness_of_fit(result.counts, joint_of(small_target, prompt)) > PASS_P


def test_kept_layers_and_refusals():
    config = Gemma3TextConfig(num_hidden_layers=8, sliding_window=4, vocab_size=16, hidden_size=8,
                              intermediate_size=8, num_attention_heads=1, num_key_value_heads=1, head_dim=8)
    kinds = config.layer_types
    assert always_kept(config) == {0, 7, kinds.index("full_attention")}
    skipped = evenly_skipped(config, 0.5)
    assert len(skipped) == 4 and not set(skipped) & always_kept(config)
    model = tiny_llama(VOCAB, seed=1, layers=3)
    with pytest.raises(SpecbenchError, match="cannot skip layer 0"):
        layer_skip_view(model, [0])
    with pytest.raises(SpecbenchError, match="ratio"):
        evenly_skipped(model.config, 1.5)
