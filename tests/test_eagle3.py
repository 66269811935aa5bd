"""EAGLE-3: the checkpoint both ways (official layout, d2t/t2d used while drafting), the fused target layers the
engine hands over, the training-time test's attention against incremental drafting, and T=0 identity with drafts
accepted. The T>0 distribution test is in test_distribution.py."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from specbench.decode.engine import generate
from specbench.decode.kv import SlotCache
from specbench.decode.sampling import Sampling
from specbench.errors import SpecbenchError
from specbench.methods.common.feature_tree import FeatureTreeDrafter, TreeSpec
from specbench.methods.eagle3.checkpoint import head_config, load_head, save_head
from specbench.methods.eagle3.drafter import Eagle3FeatureHead
from specbench.methods.eagle3.head import Eagle3Head, fused_layers
from specbench.methods.eagle3.training import Eagle3Trainable, set_draft_vocabulary, unroll
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.train.training import Batch
from tests.conftest import tiny_llama

VOCAB = 16


@pytest.fixture(scope="module")
def target():
    """Six layers (so 2, L//2, L-3 are three distinct layers), peaked so that its greedy text is learnable."""
    return tiny_llama(VOCAB, seed=31, layers=6, hidden=32, logit_scale=12.0)


def random_head(target, draft_ids: list[int], seed: int = 0) -> Eagle3Head:
    torch.manual_seed(seed)
    head = Eagle3Head(head_config(target.config, len(draft_ids)))
    head.embed_tokens.weight.data.copy_(target.get_input_embeddings().weight)
    set_draft_vocabulary(head, torch.tensor(draft_ids))
    return head


def drafter(target, head: Eagle3Head, **tree) -> FeatureTreeDrafter:
    return FeatureTreeDrafter(Eagle3FeatureHead(head, target.config.num_hidden_layers),
                              TreeSpec(**{"top_k": 3, "depth": 4, "total_tokens": 10, **tree}))


def test_fused_layers_are_the_official_ones():
    assert fused_layers(32) == (2, 16, 29) and fused_layers(30) == (2, 15, 27) and fused_layers(6) == (2, 3, 3)


def test_checkpoint_round_trip_in_the_official_layout(target, tmp_path):
    draft_ids = [1, 4, 5, 9, 12, 15]
    head = random_head(target, draft_ids)
    save_head(head, tmp_path / "h", dtype=torch.float32)
    keys = set(load_file(str(tmp_path / "h" / "model.safetensors")))
    assert {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"} <= keys
    assert all(k.startswith(("fc.", "midlayer.", "norm.", "lm_head.", "d2t", "t2d")) for k in keys), keys
    assert "midlayer.self_attn.q_proj.weight" in keys and "midlayer.hidden_norm.weight" in keys
    loaded = load_head(tmp_path / "h", target.get_input_embeddings().weight.detach())
    for key, value in head.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[key], value, rtol=0, atol=0)
    assert loaded.draft_to_target().tolist() == draft_ids and loaded.t2d.nonzero().flatten().tolist() == draft_ids
    # Drafting with the loaded head: the same trees, and every drafted token is one of the draft vocabulary's.
    prompt = [2, 3, 5, 7, 11]
    trees = []
    for h in (head, loaded):
        spy = drafter(target, h)
        proposals = []
        original = spy.propose
        spy.propose = lambda ctx, original=original, proposals=proposals: proposals.append(original(ctx)) or proposals[-1]
        generate(target, prompt, spy, Sampling(), 12, set())
        trees.append([(d.tokens, d.parents) for d in proposals])
    assert trees[0] == trees[1]
    drafted = {t for tokens, _ in trees[0] for t in tokens}
    assert drafted and drafted <= set(draft_ids)


def test_full_vocabulary_head_without_maps_loads(target, tmp_path):
    head = random_head(target, list(range(VOCAB)))
    save_head(head, tmp_path / "h", dtype=torch.float32)
    path = tmp_path / "h" / "model.safetensors"
    state = {k: v for k, v in load_file(str(path)).items() if k not in ("d2t", "t2d")}  # as official full-vocab heads
    save_file(state, str(path))
    loaded = load_head(tmp_path / "h", target.get_input_embeddings().weight.detach())
    assert loaded.draft_to_target().tolist() == list(range(VOCAB))
    eagle12 = tmp_path / "eagle12"
    eagle12.mkdir()
    (eagle12 / "config.json").write_text('{"hidden_size": 32, "vocab_size": 16}')
    with pytest.raises(SpecbenchError, match="not an EAGLE-3 head"):
        load_head(eagle12)


def test_drafter_receives_the_fused_layers(target):
    head = random_head(target, list(range(VOCAB)))
    spy = drafter(target, head)
    assert spy.hidden_layers == (2, 3, 3)
    prompt = [2, 3, 5, 7, 11]
    out = generate(target, prompt, spy, Sampling(), 6, set())
    sequence = prompt + out.token_ids
    with torch.no_grad():
        states = target(torch.tensor([sequence[:-1]]), output_hidden_states=True).hidden_states
    expected = torch.cat([states[i][0] for i in (2, 3, 3)], dim=-1)
    features = spy.rows.features[0, : spy.known]  # every cached position's, in order (batch row 0)
    assert features.shape == expected.shape
    torch.testing.assert_close(features, expected, atol=1e-5, rtol=1e-4)


def with_config(folder, **values):
    import json

    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **values}))
    return folder


def test_the_layers_an_export_names_are_the_layers_read(target, tmp_path):
    """SpecForge's eagle_config ids count layer OUTPUTS (SGLang captures the input of layer i + 1), vLLM's top-level
    ids layer INPUTS: both become output_hidden_states indices, and the drafter reads those states."""
    head = random_head(target, list(range(VOCAB)))
    save_head(head, tmp_path / "h", dtype=torch.float32)
    embedding = target.get_input_embeddings().weight.detach()
    specforge = load_head(with_config(tmp_path / "h", eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 2, 4],
                                                                   "use_aux_hidden_state": True}), embedding)
    spy = drafter(target, specforge)
    assert spy.hidden_layers == (1, 3, 5)
    prompt = [2, 3, 5, 7, 11]
    out = generate(target, prompt, spy, Sampling(), 6, set())
    with torch.no_grad():
        states = target(torch.tensor([(prompt + out.token_ids)[:-1]]), output_hidden_states=True).hidden_states
    expected = torch.cat([states[i][0] for i in (1, 3, 5)], dim=-1)
    torch.testing.assert_close(spy.rows.features[0, : spy.known], expected, atol=1e-5, rtol=1e-4)
    vllm = tmp_path / "v"
    save_head(head, vllm, dtype=torch.float32)
    assert drafter(target, load_head(with_config(vllm, eagle_aux_hidden_state_layer_ids=[1, 3, 5]),
                                     embedding)).hidden_layers == (1, 3, 5)


@pytest.mark.parametrize("values, says", [
    ({"fc_norm": True, "norm_before_fc": True}, "sets both fc_norm and norm_before_fc"),
    ({"fc_norm": True}, "sets fc_norm \\(fc_norm.0.weight\\) but the weights are not in the file"),
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2]}}, "fuses three target layers"),
], ids=["both fusion norms", "flag without its weights", "two layers"])
def test_an_export_this_head_cannot_follow_is_refused_not_misread(target, tmp_path, values, says):
    save_head(random_head(target, list(range(VOCAB))), tmp_path / "h", dtype=torch.float32)
    with pytest.raises(SpecbenchError, match=says):
        load_head(with_config(tmp_path / "h", **values), target.get_input_embeddings().weight.detach())


def speculators_folder(head: Eagle3Head, folder, **flags):
    """The head as vLLM's speculators writes an EAGLE-3 checkpoint: the layer config nested, layers.0.* keys,
    the flags and the draft vocabulary at the top level."""
    import json

    save_head(head, folder, dtype=torch.float32, with_embedding=True)
    official = json.loads((folder / "config.json").read_text())
    layer = {k: v for k, v in official.items() if k not in ("draft_vocab_size", "architectures", "bias", "torch_dtype")}
    config = {"speculators_model_type": "eagle3", "architectures": ["Eagle3Speculator"],
              "speculators_config": {"algorithm": "eagle3", "verifier": {"name_or_path": "tiny"}},
              "transformer_layer_config": layer, "draft_vocab_size": official["draft_vocab_size"],
              "target_hidden_size": None, "eagle_aux_hidden_state_layer_ids": [1, 3, 5],
              **{"norm_before_residual": False, "norm_before_fc": False, "fc_norm": False, "norm_output": False},
              **flags}
    (folder / "config.json").write_text(json.dumps(config))
    state = load_file(str(folder / "model.safetensors"))
    save_file({k.replace("midlayer.", "layers.0.", 1): v for k, v in state.items()}, str(folder / "model.safetensors"))
    return folder


def first_step(head: Eagle3Head, target, prompt: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The head's state and logits on the prompt's fused layers (its first draft step)."""
    with torch.no_grad():
        states = target(torch.tensor([prompt]), output_hidden_states=True).hidden_states
        features = torch.cat([states[i] for i in (1, 3, 5)], dim=-1)
        positions = torch.arange(len(prompt))[None]
        mask = torch.full((len(prompt), len(prompt)), float("-inf")).triu(1)[None, None]
        out = head(torch.tensor([prompt[1:] + [0]]), features, positions, mask)
        return out, head.logits(out)


def test_a_speculators_checkpoint_loads_as_the_same_head(target, tmp_path):
    head = random_head(target, [1, 4, 5, 9, 12, 15])
    loaded = load_head(speculators_folder(head, tmp_path / "s"))
    assert loaded.config.aux_layer_ids == (1, 3, 5)  # vLLM's ids: layer inputs, no offset
    for key, value in head.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[key], value, rtol=0, atol=0)
    prompt = [2, 3, 5, 7, 11, 13]
    for a, b in zip(first_step(head, target, prompt), first_step(loaded, target, prompt)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_variant_flags_change_what_they_say(target, tmp_path):
    """Each flag against its formula (methods/eagle3/head.py; vLLM's llama_eagle3), on random weights."""
    from torch.nn import functional as F

    base = random_head(target, list(range(VOCAB)), seed=3)
    prompt = [2, 3, 5, 7, 11, 13]
    plain_out, plain_logits = first_step(base, target, prompt)
    with torch.no_grad():
        states = target(torch.tensor([prompt]), output_hidden_states=True).hidden_states
    A = torch.cat([states[i] for i in (1, 3, 5)], dim=-1)
    eps = target.config.rms_norm_eps

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def flagged(name, **flags):
        folder = speculators_folder(base, tmp_path / name, **flags)
        state = load_file(str(folder / "model.safetensors"))
        width = A.shape[-1]
        if flags.get("norm_before_fc"):
            state["input_norm.weight"] = torch.rand(width) + 0.5
        if flags.get("fc_norm"):
            state.update({f"fc_norm.{k}.weight": torch.rand(width // 3) + 0.5 for k in range(3)})
        save_file(state, str(folder / "model.safetensors"))
        return load_head(folder), state

    head, state = flagged("fc", norm_before_fc=True)
    fused = F.linear(rms(A, state["input_norm.weight"]), base.fc.weight)
    torch.testing.assert_close(head.inputs(torch.tensor([prompt]), A)[1], fused, atol=1e-5, rtol=1e-5)
    head, state = flagged("chunks", fc_norm=True)
    parts = [rms(part, state[f"fc_norm.{k}.weight"]) for k, part in enumerate(A.chunk(3, -1))]
    torch.testing.assert_close(head.inputs(torch.tensor([prompt]), A)[1],
                               F.linear(torch.cat(parts, -1), base.fc.weight), atol=1e-5, rtol=1e-5)
    head, _ = flagged("residual", norm_before_residual=True)
    out, _ = first_step(head, target, prompt)
    with torch.no_grad():  # the layer by hand: the attention as before, its residual hidden_norm(g) instead of g
        layer, g = base.midlayer, base.fc(A)
        positions = torch.arange(len(prompt))[None]
        mask = torch.full((len(prompt), len(prompt)), float("-inf")).triu(1)[None, None]
        both = torch.cat([layer.input_layernorm(base.embed_tokens(torch.tensor([prompt[1:] + [0]]))),
                          layer.hidden_norm(g)], dim=-1)
        attended, _ = layer.self_attn(both, position_embeddings=base.rotary_emb(g, positions), attention_mask=mask,
                                      cache=None)
        torch.testing.assert_close(out, layer.feed_forward(layer.hidden_norm(g) + attended), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(plain_out, layer.feed_forward(g + attended), atol=1e-5, rtol=1e-5)
    head, _ = flagged("output", norm_output=True)
    out, logits = first_step(head, target, prompt)
    torch.testing.assert_close(out, base.norm(plain_out), atol=1e-6, rtol=1e-5)  # the state fed back is normed
    torch.testing.assert_close(logits, plain_logits, atol=1e-5, rtol=1e-5)  # the logits are not


def test_training_time_test_matches_incremental_drafting(target):
    """Step j of the unrolled training at position t is what the drafter computes for a node j levels below the
    root t, with the true tokens on its path: the context's keys up to t, then one key per ancestor."""
    head = random_head(target, list(range(VOCAB)), seed=3).eval()
    tokens = torch.tensor([[2, 3, 5, 7, 11, 13, 1, 4, 6, 8]])
    layers = fused_layers(target.config.num_hidden_layers)
    with torch.no_grad():
        states = target(tokens, output_hidden_states=True).hidden_states
        fused = torch.cat([states[i] for i in layers], dim=-1)
        steps = unroll(head, tokens, fused, 3)
        adapter = Eagle3FeatureHead(head, target.config.num_hidden_layers)
        for t in (3, 5):
            cache = SlotCache(1)  # slot s holds position s: the context at 0..t, node j at t + j
            cache.reserve(1, 16)
            context = adapter.run(tokens[:, 1 : t + 2], fused[:, : t + 1], torch.arange(t + 1)[None], None, cache,
                                  input_pos=torch.arange(t + 1)[None], key_slots=t + 1)[0]
            torch.testing.assert_close(context[-1], steps[0][0, t], atol=1e-5, rtol=1e-4)
            feature = context[-1]
            for j in (1, 2):  # one node per level, its token the true next one; it sees the context and itself
                out = adapter.run(tokens[:, t + 1 + j : t + 2 + j], feature[None, None], torch.tensor([[t + j]]), None,
                                  cache, input_pos=torch.tensor([[t + j]]), key_slots=t + 1 + j)[0]
                torch.testing.assert_close(out[0], steps[j][0, t], atol=1e-5, rtol=1e-4)
                feature = out[0]


def test_training_loss_is_the_weighted_cross_entropy_over_the_counted_positions(target):
    """Step j at position t: cross-entropy of the head's draft distribution against the target's at t + 1 + j
    (renormalised over the draft vocabulary), averaged over positions whose next-next token is a counted reply
    token, not padding and in the draft vocabulary; steps weighted 0.8^j. Written out position by position."""
    draft_ids = [0, 1, 2, 3, 5, 7, 9, 11, 13]  # some tokens are not draftable
    head = random_head(target, draft_ids, seed=5)
    tokens = torch.tensor([[2, 3, 5, 7, 11, 13, 1, 4, 6, 8], [9, 7, 5, 3, 1, 2, 4, 0, 0, 0]])
    valid = tokens != 0
    valid[0] = True
    loss_mask = valid.clone()
    loss_mask[:, :3] = False  # a prompt
    batch = Batch(tokens, torch.zeros(2, 10, 1), loss_mask, valid)
    trainable = Eagle3Trainable(head, target, steps=3)
    loss, metrics = trainable.loss(batch)
    with torch.no_grad():
        fused, target_logits = trainable._target(batch)
        states = unroll(head, tokens, fused, 3)
        expected, n = 0.0, tokens.shape[1]
        for j, hidden in enumerate(states):
            terms = []
            for b in range(2):
                for t in range(n - 1 - j):
                    u = t + 1 + j
                    if loss_mask[b, u] and valid[b, u] and int(tokens[b, u + 1 if u + 1 < n else 0]) in draft_ids:
                        p = torch.softmax(target_logits[b, u], -1)
                        terms.append(-(p * torch.log_softmax(head.logits(hidden[b, t]), -1)).sum())
            assert terms  # every step counts some positions
            expected += 0.8 ** j * torch.stack(terms).mean()
    torch.testing.assert_close(loss.detach(), expected, atol=1e-5, rtol=1e-5)
    assert set(metrics) >= {"acc_step0", "acc_step1", "acc_step2", "top1"}


def test_the_targets_side_stays_fp32_under_mixed_precision(target):
    head = random_head(target, list(range(VOCAB)), seed=6)
    tokens = torch.tensor([[2, 3, 5, 7, 11, 13, 1, 4]])
    valid = torch.ones_like(tokens, dtype=torch.bool)
    batch = Batch(tokens, torch.zeros(1, 8, 1), valid, valid)
    trainable = Eagle3Trainable(head, target, steps=2)
    fused, logits = trainable._target(batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused_amp, logits_amp = trainable._target(batch)
        loss, _ = trainable.loss(batch)
    assert torch.equal(logits_amp, logits) and torch.equal(fused_amp, fused)
    assert torch.isfinite(loss)


def trained_head(target, prompts: list[list[int]], draft_ids: list[int], steps: int = 200) -> Eagle3Head:
    """A head trained for a moment with the training-time test on the target's own greedy continuations."""
    head = random_head(target, draft_ids, seed=4)
    samples = [p + generate(target, p, VanillaDrafter(), Sampling(), 24, set()).token_ids for p in prompts]
    n = max(len(s) for s in samples)
    tokens = torch.zeros(len(samples), n, dtype=torch.long)
    valid = torch.zeros(len(samples), n, dtype=torch.bool)
    for row, s in enumerate(samples):
        tokens[row, : len(s)] = torch.tensor(s)
        valid[row, : len(s)] = True
    batch = Batch(tokens, torch.zeros(len(samples), n, 1), valid.clone(), valid)
    trainable = Eagle3Trainable(head, target, steps=4)
    optimizer = torch.optim.Adam([p for p in head.parameters() if p.requires_grad], lr=0.01)
    for _ in range(steps):
        loss, _ = trainable.loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return head.eval()


def test_t0_identical_to_vanilla_with_drafts_accepted(target):
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, VOCAB, (4,), generator=gen).tolist() for _ in range(24)]
    head = trained_head(target, prompts[:16], list(range(VOCAB)))
    accepted = steps = 0
    for prompt in prompts:  # 16 training prompts and 8 others
        expected = generate(target, prompt, VanillaDrafter(), Sampling(), 24, set()).token_ids
        out = generate(target, prompt, drafter(target, head), Sampling(), 24, set())
        assert out.token_ids == expected, prompt
        accepted += sum(out.accept_lengths) - len(out.accept_lengths)
        steps += len(out.accept_lengths)
    tau = (accepted + steps) / steps
    assert tau > 2.0, f"τ {tau:.2f}: the trained head's drafts were hardly accepted"


def test_no_head_for_an_unknown_target_is_one_clear_error(tmp_path, tiny_target_dir, capsys):
    from specbench.cli import main

    code = main(["run", "--target", str(tiny_target_dir), "--methods", "eagle3", "--tasks", "gsm8k", "--limit", "1",
                 "--out", str(tmp_path / "r"), "--report-dir", str(tmp_path / "rep")])
    assert code == 2 and "no trained EAGLE-3 head ships" in capsys.readouterr().err
