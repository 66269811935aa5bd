"""EAGLE on tiny models: the official checkpoint layout both ways, training through the CLI, and T=0 identity with
vanilla for eagle (dynamic tree), eagle1 (static tree) and every ablation head."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from specbench.cli import main
from specbench.decode.draft import parse_tree
from specbench.decode.engine import generate
from specbench.decode.sampling import Sampling
from specbench.decode.target import chat_tokens, load_model
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.common.feature_tree import TreeSpec
from specbench.methods.eagle.checkpoint import load_head, save_head
from specbench.methods.eagle.drafter import EagleDrafter
from specbench.methods.eagle.head import INPUTS, EagleHead, head_config
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.run.registry import available_methods
from tests.conftest import tiny_llama, write_prompts

OFFICIAL_KEYS = {
    "fc.weight", "fc.bias", "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight",
    "layers.0.self_attn.v_proj.weight", "layers.0.self_attn.o_proj.weight", "layers.0.mlp.gate_proj.weight",
    "layers.0.mlp.up_proj.weight", "layers.0.mlp.down_proj.weight", "layers.0.post_attention_layernorm.weight",
}
WORDS = "the quick brown fox jumps over the lazy dog what is the answer".split()


def random_head(target, inputs: str = "shifted", seed: int = 0) -> EagleHead:
    torch.manual_seed(seed)
    head = EagleHead(head_config(target.config, inputs))
    head.embed_tokens.weight.data.copy_(target.get_input_embeddings().weight)
    return head.eval()


def head_outputs(head: EagleHead, hidden: int) -> torch.Tensor:
    tokens = torch.tensor([[1, 5, 9, 2]])
    features = torch.linspace(-1, 1, 4 * hidden).reshape(1, 4, hidden)
    with torch.no_grad():
        return head(tokens, features, torch.arange(4).unsqueeze(0), None)


def test_official_layout_round_trip(tmp_path):
    target = tiny_llama(64, seed=5)
    head = random_head(target)
    save_head(head, tmp_path / "ours", draft_vocab=torch.tensor([3, 1, 2]), dtype=torch.float32, with_embedding=True)
    state = load_file(str(tmp_path / "ours" / "model.safetensors"))
    assert set(state) == OFFICIAL_KEYS | {"embed_tokens.weight"}
    hidden, inter = target.config.hidden_size, target.config.intermediate_size
    kv = target.config.num_key_value_heads * hidden // target.config.num_attention_heads
    assert state["fc.weight"].shape == (hidden, 2 * hidden) and state["fc.bias"].shape == (hidden,)
    assert state["layers.0.self_attn.k_proj.weight"].shape == (kv, hidden)
    assert state["layers.0.mlp.gate_proj.weight"].shape == (inter, hidden)
    config = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert config["num_hidden_layers"] == 1 and config["bias"] is True and "rope_theta" in config
    loaded, vocab = load_head(tmp_path / "ours")
    assert vocab.tolist() == [3, 1, 2]
    assert torch.equal(head_outputs(head, hidden), head_outputs(loaded, hidden))

    # An official checkpoint: pytorch_model.bin, no specbench keys, and (as some do) no embedding.
    official = tmp_path / "official"
    official.mkdir()
    config = {k: v for k, v in config.items() if not k.startswith("specbench")}
    (official / "config.json").write_text(json.dumps(config))
    torch.save({k: v for k, v in state.items() if k != "embed_tokens.weight"}, official / "pytorch_model.bin")
    with pytest.raises(SpecbenchError):
        load_head(official)  # no embedding and no target to take it from
    from_official, vocab = load_head(official, target.get_input_embeddings().weight.detach())
    assert vocab is None
    assert torch.equal(head_outputs(head, hidden), head_outputs(from_official, hidden))


def test_an_official_head_with_qkv_bias_loads_and_uses_its_biases(tmp_path):
    """The official EAGLE-1/2 heads of Qwen2 targets say `qkv_bias: true` (cnets1.py): q, k and v carry a bias, o
    does not. The loaded head equals a Llama layer with all four biases whose o bias is zero, and differs from the
    head without them."""
    target = tiny_llama(64, seed=5)
    plain = random_head(target)
    hidden = target.config.hidden_size
    state = {k: v for k, v in plain.state_dict().items() if k != "embed_tokens.weight"}
    generator = torch.Generator().manual_seed(3)
    for name in ("q_proj", "k_proj", "v_proj"):
        rows = state[f"layers.0.self_attn.{name}.weight"].shape[0]
        state[f"layers.0.self_attn.{name}.bias"] = torch.randn(rows, generator=generator)
    official = tmp_path / "qwen2-head"
    official.mkdir()
    config = {**head_config(target.config).to_dict(), "qkv_bias": True, "bias": True}
    (official / "config.json").write_text(json.dumps({k: v for k, v in config.items() if not k.startswith("specbench")}))
    torch.save(state, official / "pytorch_model.bin")
    loaded, _ = load_head(official, target.get_input_embeddings().weight.detach())
    attention = loaded.layers[0].self_attn
    assert attention.o_proj.bias is None
    assert torch.equal(attention.q_proj.bias, state["layers.0.self_attn.q_proj.bias"])

    all_biased = head_config(target.config)
    all_biased.attention_bias = True
    formula = EagleHead(all_biased).eval()
    formula.load_state_dict({**state, "embed_tokens.weight": target.get_input_embeddings().weight.detach(),
                             "layers.0.self_attn.o_proj.bias": torch.zeros(hidden)})
    assert torch.allclose(head_outputs(loaded, hidden), head_outputs(formula, hidden), atol=1e-6)
    assert not torch.allclose(head_outputs(loaded, hidden), head_outputs(plain, hidden), atol=1e-3)
    save_head(loaded, tmp_path / "again", draft_vocab=None, dtype=torch.float32)  # and back, readable by both
    assert json.loads((tmp_path / "again" / "config.json").read_text())["qkv_bias"] is True
    again, _ = load_head(tmp_path / "again", target.get_input_embeddings().weight.detach())
    assert torch.equal(head_outputs(again, hidden), head_outputs(loaded, hidden))


def test_not_a_head_is_one_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 32, "num_attention_heads": 4}))
    torch.save({"something.else": torch.zeros(2)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(SpecbenchError, match="not an EAGLE-1/2 head"):
        load_head(tmp_path, torch.zeros(64, 32))
    with pytest.raises(SpecbenchError, match="lacks its parent"):
        parse_tree("[[0],[1,0]]")


@pytest.fixture(scope="module")
def trained_heads(tiny_target_dir, tmp_path_factory) -> dict[str, Path]:
    """Heads trained through the CLI on the tiny target's own replies: the EAGLE head long enough to be right
    often, the ablations for a few steps (they only have to build, train and decode)."""
    folder = tmp_path_factory.mktemp("eagle_train")
    turns = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(3 + i % 5)) for i in range(48)]
    prompts = write_prompts(folder / "prompts.jsonl", turns)
    heads = {}
    for inputs in INPUTS:
        out = folder / inputs
        budget = "60000" if inputs == "shifted" else "300"
        code = main(["train", "eagle", "--target", str(tiny_target_dir), "--data", str(prompts), "--mode", "self",
                     "--prompts", "48", "--features", str(folder / "features"), "--out", str(out),
                     "--max-tokens", budget, "--lr", "3e-3", "--batch-tokens", "1024", "--eval-every", "50",
                     "--opt", f"inputs={inputs}", "--opt", "draft_vocab=0"])
        assert code == 0
        heads[inputs] = out
    return heads


def test_training_writes_an_official_head_and_a_curve(trained_heads):
    out = trained_heads["shifted"]
    assert set(load_file(str(out / "model.safetensors"))) == OFFICIAL_KEYS
    curve = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert curve[-1]["final"] and curve[-1]["tokens"] >= 60000
    assert curve[-1]["heldout_top1"] > curve[0]["heldout_top1"]  # it learned something


@pytest.fixture(scope="module")
def tiny_target(tiny_target_dir):
    return load_model(str(tiny_target_dir))


def decode(target, drafter, prompt: list[int], n: int = 40):
    return generate(target.model, prompt, drafter, Sampling(), n, set())


@pytest.mark.parametrize("method", ["eagle", "eagle1", "eagle-shifted", "eagle-unshifted", "eagle-feature", "eagle-token"])
def test_eagle_emits_vanilla_tokens_at_t0(tiny_target, trained_heads, method):
    inputs = {"eagle": "shifted", "eagle1": "shifted"}.get(method, method.removeprefix("eagle-"))
    info = available_methods()[method]
    options = {"top_k": "3"} if info.declared("top_k") else {}  # eagle1's static tree has no top_k
    drafter = info.drafter(BuildContext(tiny_target, draft=str(trained_heads[inputs]), options=options))
    for i in range(6):
        words = " ".join(WORDS[(7 * i + j) % len(WORDS)] for j in range(4 + i))
        prompt = chat_tokens(tiny_target.tokenizer, [{"role": "user", "content": words}])
        if i % 3 == 2:
            prompt = torch.randint(0, 300, (5 + i,), generator=torch.Generator().manual_seed(i)).tolist()
        expected = decode(tiny_target, VanillaDrafter(), prompt).token_ids
        assert decode(tiny_target, drafter, prompt).token_ids == expected


class RecordingDrafter(EagleDrafter):
    """Keeps every proposed tree with the context it was proposed for."""

    def begin(self, ctx):
        super().begin(ctx)
        self.trees = []

    def propose(self, ctx):
        draft = super().propose(ctx)
        self.trees.append((list(ctx.token_ids), draft, dict(self.tree_features)))
        return draft


@pytest.mark.parametrize("inputs", ["shifted", "unshifted"])
def test_incremental_drafting_equals_the_head_run_from_scratch(tiny_target, trained_heads, inputs):
    """The drafter's cache bookkeeping (fill from true features, tree steps, crop) must give each tree node the
    candidates a fresh run of the head over the true features and the node's own path gives."""
    model = tiny_target.model
    head, vocab = load_head(trained_heads[inputs], model.get_input_embeddings().weight.detach())
    lm_head = model.get_output_embeddings().weight.detach()
    k = 2
    drafter = RecordingDrafter(head, lm_head, vocab, TreeSpec(top_k=k, depth=3, total_tokens=10))
    prompt = chat_tokens(tiny_target.tokenizer, [{"role": "user", "content": "the lazy dog jumps"}])
    decode(tiny_target, drafter, prompt, n=30)
    checked = 0
    for context, draft, features in drafter.trees[1:]:  # the first proposal is made before the prefill: empty
        with torch.no_grad():
            true = model.get_decoder()(input_ids=torch.tensor([context[:-1]])).last_hidden_state[0]
        for node in range(len(draft)):
            path = [node]
            while draft.parents[path[0]] >= 0:
                path.insert(0, draft.parents[path[0]])
            # Inputs of the head from scratch: the context with true features, then the path with predicted ones.
            n = len(context) - 1
            tokens = context[head.shift : n + head.shift]
            feats = true
            for depth in range(len(path)):
                with torch.no_grad():
                    predicted = head(torch.tensor([tokens]), feats.unsqueeze(0),
                                     torch.arange(len(tokens)).unsqueeze(0),
                                     _causal(len(tokens)))[0, -1]
                if depth == len(path) - 1:
                    break
                if head.shift:
                    tokens = tokens + [draft.tokens[path[depth]]]
                else:
                    tokens = tokens + [context[-1] if depth == 0 else draft.tokens[path[depth - 1]]]
                feats = torch.cat([feats, predicted.unsqueeze(0)])
            parent = draft.parents[node]
            torch.testing.assert_close(features[parent], predicted, atol=1e-4, rtol=1e-4)
            assert draft.tokens[node] in (predicted @ lm_head.T).topk(k).indices.tolist()
            checked += 1
    assert checked > 20


def _causal(n: int) -> torch.Tensor:
    return torch.zeros(n, n).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))[None, None]


def test_static_tree_shape(tiny_target, trained_heads):
    head, vocab = load_head(trained_heads["shifted"], tiny_target.model.get_input_embeddings().weight.detach())
    tree = parse_tree("[[0],[1],[0,0],[0,1],[1,0],[0,0,0]]")
    drafter = EagleDrafter(head, tiny_target.model.get_output_embeddings().weight, vocab, TreeSpec(static_paths=tree))
    prompt = [5, 6, 7, 8]
    seen = []

    class Spy(EagleDrafter):
        def propose(self, ctx):
            draft = super().propose(ctx)
            seen.append((draft.parents, len(set(zip(draft.parents, draft.tokens)))))
            return draft

    drafter.__class__ = Spy
    decode(tiny_target, drafter, prompt, n=8)
    parents, distinct = seen[1]  # seen[0] is the prefill step, which has no features yet
    assert parents == [-1, -1, 0, 0, 1, 2] and distinct == 6
