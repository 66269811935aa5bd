"""Targets of every attention kind transformers ships that specbench supports: full attention (Llama, Qwen2/3,
Qwen3-MoE, Mixtral, Phi-3, OLMo 2, Granite), sliding windows (Mistral with one window for all layers; Gemma 2/3 and
gpt-oss with a mask per layer kind) and MLA (DeepSeek-V3). Tiny random models, each with a window of 4 positions
where it has one, so the prompts and outputs run well past it.

At T=0 every method emits HF greedy `generate`'s tokens, alone and four rows at once (prompts of different
lengths), with drafts accepted; at T>0 tree drafts on a sliding-window family and on MLA sample the exact joint.
MLA with fewer key/value heads than query heads decodes through `run` and passes `check`. Recurrent and hybrid
families are refused with one line before anything is decoded; a target whose forward fails stops `run` with one
line."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from specbench.cli import main
from specbench.decode.costs import measure_forward_curve
from specbench.decode.engine import generate, generate_batch
from specbench.decode.layout import AttentionLayout
from specbench.decode.sampling import Sampling, target_probs
from specbench.decode.target import LoadedModel, load_model
from specbench.errors import SpecbenchError
from specbench.methods.common.draft_model import DraftModelDrafter
from specbench.methods.lookahead.drafter import LookaheadDrafter
from specbench.methods.pld.drafter import PromptLookupDrafter
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.run.failures import target_step
from tests.conftest import tiny_tokenizer
from tests.drafters import ModelTreeDrafter, RandomTreeDrafter, fitted_eagle_head
from tests.stats import goodness_of_fit

VOCAB = 48
WINDOW = 4
MOE = {"num_local_experts": 4, "num_experts_per_tok": 2}
FAMILIES = {
    "llama": {},
    "qwen2": {},
    "qwen3": {},
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
    "mixtral": MOE,
    "phi3": {},
    "olmo2": {},
    "granite": {},
    "mistral": {"sliding_window": WINDOW},
    "gemma2": {"sliding_window": WINDOW},
    "gemma3_text": {"sliding_window": WINDOW, "layer_types": ["sliding_attention", "full_attention"]},
    "gpt_oss": {"sliding_window": WINDOW, "layer_types": ["sliding_attention", "full_attention"], **MOE},
    "deepseek_v3": {"num_key_value_heads": 4, "head_dim": 4, "q_lora_rank": 16, "kv_lora_rank": 16,
                    "qk_rope_head_dim": 4, "qk_nope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 4,
                    "num_experts_per_tok": 2, "first_k_dense_replace": 1, "moe_intermediate_size": 16,
                    "n_group": 1, "topk_group": 1},
}
SLIDING = ["mistral", "gemma2", "gemma3_text", "gpt_oss"]
PROMPTS = [[3, 7, 1, 5, 9, 2, 3, 7, 1, 5, 9, 2, 3, 7], [4, 4, 8], [11, 2, 6, 11, 2, 6, 11, 2, 6, 11, 2],
           [1, 30, 5, 7, 12]]
TOKENS = 40


def tiny(family: str, seed: int, vocab: int = VOCAB, scale: float = 4.0, noise: float = 0.0,
         **config_values: object) -> PreTrainedModel:
    """A random model of the family: two layers, peaked logits (scale); noise perturbs the output layer (a draft
    model of the same family that agrees with the target often, not always); config_values override the family's."""
    shape = {"vocab_size": vocab, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 256,
             "tie_word_embeddings": False}
    config = AutoConfig.for_model(family, **{**shape, **FAMILIES[family], **config_values})
    config.pad_token_id = config.eos_token_id = config.bos_token_id = None
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        out = model.get_output_embeddings().weight
        out.mul_(scale / out.std())
        if noise:
            out.add_(noise * torch.randn_like(out))
    return model


def hf_greedy(model: PreTrainedModel, prompt: list[int]) -> list[int]:
    out = model.generate(torch.tensor([prompt]), max_new_tokens=TOKENS, do_sample=False, min_new_tokens=TOKENS)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request) -> tuple[str, PreTrainedModel, PreTrainedModel, list[list[int]]]:
    name = request.param
    target = tiny(name, seed=0)
    return name, target, tiny(name, seed=0, noise=1.5), [hf_greedy(target, p) for p in PROMPTS]


def drafters(target: PreTrainedModel, draft: PreTrainedModel, references: list[list[int]], row: int) -> dict:
    return {"vanilla": VanillaDrafter(), "pld": PromptLookupDrafter(), "lookahead": LookaheadDrafter(4, 4, 4),
            "sps": DraftModelDrafter(draft, gamma=4, vocab_size=VOCAB),
            "random tree": RandomTreeDrafter(VOCAB, seed=row, reference=references[row])}


def test_layout_matches_the_family(family):
    name, target, _, _ = family
    layout = AttentionLayout.of(target.config)
    assert bool(layout.windows) == (name in SLIDING)
    assert layout.per_kind == (name in ("gemma2", "gemma3_text", "gpt_oss"))


@pytest.mark.parametrize("method", ["vanilla", "pld", "lookahead", "sps", "random tree"])
def test_t0_identical_to_hf_generate_alone_and_in_a_batch(family, method):
    name, target, draft, references = family
    alone = [generate(target, p, drafters(target, draft, references, i)[method], Sampling(), TOKENS, set())
             for i, p in enumerate(PROMPTS)]
    rows = [drafters(target, draft, references, i)[method] for i in range(len(PROMPTS))]
    together = generate_batch(target, PROMPTS, rows, Sampling(), TOKENS, set())
    for i, (single, batched) in enumerate(zip(alone, together)):
        assert single.token_ids == references[i], f"{name} {method} row {i} alone"
        assert batched.token_ids == references[i], f"{name} {method} row {i} in the batch"
    if method == "vanilla":
        return
    deep = sum(max(0, a - 2) for g in alone + together for a in g.accept_lengths)
    assert deep >= 2, f"{name} {method}: no draft token accepted at depth >= 2"


# ---------------------------------------------------------------------- MLA with fewer key/value heads


def test_mla_with_fewer_key_value_heads_than_query_heads_decodes_and_passes_check(tmp_path):
    """DeepSeek-V3 with 2 key/value heads for 4 query heads (keys as wide as values: HF's generate decodes it, on
    its unmasked path). Loaded as `run` loads it, the cost measurement's tree forward runs, every method emits
    HF's greedy tokens alone and in a batch with drafts accepted at depth >= 2, and `run` then `check` passes."""
    tokenizer = tiny_tokenizer(300)
    model = tiny("deepseek_v3", seed=0, vocab=len(tokenizer), num_key_value_heads=2, v_head_dim=12)
    folder, out = tmp_path / "mla", tmp_path / "run"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    references = [hf_greedy(model, p) for p in PROMPTS]
    target = load_model(str(folder))
    assert len(measure_forward_curve(target.model, [1, 8], tree=True, repeats=1).seconds) == 2
    for method in ("vanilla", "pld", "random tree"):
        rows = [{"vanilla": VanillaDrafter(), "pld": PromptLookupDrafter(),
                 "random tree": RandomTreeDrafter(len(tokenizer), seed=i, reference=r)}[method]
                for i, r in enumerate(references)]
        together = generate_batch(target.model, PROMPTS, rows, Sampling(), TOKENS, set())
        alone = [generate(target.model, p, row.fork(), Sampling(), TOKENS, set()) for p, row in zip(PROMPTS, rows)]
        assert [g.token_ids for g in alone] == [g.token_ids for g in together] == references, method
        if method == "random tree":
            assert sum(max(0, a - 2) for g in alone + together for a in g.accept_lengths) >= 2
    code = main(["run", "--target", str(folder), "--methods", "vanilla,pld,lookahead", "--tasks", "gsm8k",
                 "--limit", "2", "--max-new-tokens", "16", "--out", str(out), "--report-dir", str(tmp_path / "rep")])
    assert code == 0
    assert main(["check", str(out)]) == 0


# ------------------------------------------------------------------------------------------------- T > 0

SMALL_VOCAB, STEPS, SAMPLES = 10, 3, 2000
SAMPLING = Sampling(temperature=0.8, top_p=0.95)
LONG_PROMPT = [3, 7, 1, 5, 9, 2, 3, 7, 1, 5, 9, 2]  # three windows long


@pytest.mark.parametrize("name", ["gemma3_text", "deepseek_v3"])
def test_tree_drafts_sample_the_exact_joint(name):
    target = tiny(name, seed=3, vocab=SMALL_VOCAB, scale=3.0)
    draft = tiny(name, seed=3, vocab=SMALL_VOCAB, scale=3.0, noise=1.0)
    joint, contexts = torch.ones(1, dtype=torch.float64), [[]]
    with torch.no_grad():
        for _ in range(STEPS):
            p = target_probs(target(torch.tensor([LONG_PROMPT + c for c in contexts])).logits[:, -1], SAMPLING)
            joint = (joint[:, None] * p.double()).reshape(-1)
            contexts = [c + [x] for c in contexts for x in range(SMALL_VOCAB)]
    counts, deep = np.zeros((SMALL_VOCAB,) * STEPS), 0
    generator = torch.Generator().manual_seed(5)
    drafter = ModelTreeDrafter(draft, width=2, sampled=True)
    for _ in range(SAMPLES):
        out = generate(target, LONG_PROMPT, drafter, SAMPLING, STEPS, set(), generator)
        counts[tuple(out.token_ids)] += 1
        deep += sum(max(0, a - 2) for a in out.accept_lengths)
    assert deep >= 300, f"only {deep} draft tokens accepted at depth >= 2"
    assert goodness_of_fit(counts, joint.reshape((SMALL_VOCAB,) * STEPS).numpy()) > 1e-3


# ------------------------------------------------------------------------------------------------- refused


RECURRENT = {"qwen3_next": {"linear_num_key_heads": 2, "linear_num_value_heads": 2, "linear_key_head_dim": 8,
                            "linear_value_head_dim": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
                            "head_dim": 8, "intermediate_size": 64, "num_experts": 2, "moe_intermediate_size": 16},
             "mamba2": {"num_heads": 2, "head_dim": 32, "n_groups": 1, "state_size": 8}}


@pytest.mark.parametrize("name", list(RECURRENT))
def test_recurrent_families_are_refused_in_one_line(name, tmp_path, capsys):
    tokenizer = tiny_tokenizer(300)
    config = AutoConfig.for_model(name, vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                                  **RECURRENT[name])
    with pytest.raises(SpecbenchError, match=f"target family {name}"):
        AttentionLayout.of(config)
    folder = tmp_path / name
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    code = main(["run", "--target", str(folder), "--methods", "vanilla", "--tasks", "gsm8k", "--limit", "1",
                 "--out", str(tmp_path / "r"), "--report-dir", str(tmp_path / "rep")])
    err = capsys.readouterr().err
    assert code == 2 and f"specbench: error: target family {name}" in err and "Traceback" not in err, err
    assert not (tmp_path / "r" / "records.jsonl").exists()


def test_a_target_whose_forward_fails_costs_one_line(tmp_path):
    """A Llama with 3 key/value heads for 4 query heads loads, then its attention fails on the first forward (the
    cost measurement): `python -m specbench run` says so in one line, naming the target, its family and the step."""
    tokenizer = tiny_tokenizer(300)
    config = AutoConfig.for_model("llama", vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=3, head_dim=8)
    folder = tmp_path / "broken"
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    done = subprocess.run([sys.executable, "-m", "specbench", "run", "--target", str(folder), "--methods", "vanilla",
                           "--tasks", "gsm8k", "--limit", "1", "--out", str(tmp_path / "r"), "--report-dir",
                           str(tmp_path / "rep")], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]  # besides loading bars
    assert len(errors) == 1 and done.stderr.rstrip().endswith(errors[0]), done.stderr
    assert errors[0].startswith(f"specbench: error: target {folder} (llama family) failed in the cost measurement: "
                                "RuntimeError: "), errors[0]


def test_only_a_failure_inside_the_target_forward_becomes_one_line():
    target = LoadedModel("t", tiny("llama", seed=0), tiny_tokenizer(300))
    with pytest.raises(SpecbenchError, match=r"^target t \(llama family\) failed in a step: IndexError: index out"):
        with target_step(target, "a step"):
            target.model(torch.tensor([[VOCAB + 1]]))
    with pytest.raises(ValueError, match="a method's own bug"):  # not the target's: it keeps its traceback
        with target_step(target, "a step"):
            raise ValueError("a method's own bug")


# ------------------------------------------------------------------------------ heads built for any family


@pytest.mark.parametrize("name", ["gemma3_text", "gemma2", "qwen2", "deepseek_v3"])
def test_an_eagle_head_trained_for_a_moment_drafts_for_the_family(name):
    """The head's token embeddings are the target's as its first layer receives them (Gemma scales them by
    sqrt(hidden): in the embedding module for Gemma 3, in the model's forward for Gemma 2); its layer is built from
    the target's sizes. Trained briefly on the target's own greedy outputs, it drafts, and drafts are accepted."""
    from specbench.methods.common.feature_tree import TreeSpec
    from specbench.methods.common.official import target_embedding
    from specbench.methods.eagle.drafter import EagleDrafter

    target = tiny(name, seed=0)
    ids = torch.tensor([PROMPTS[0]])
    with torch.no_grad():
        first = target(ids, output_hidden_states=True).hidden_states[0][0]
    embedding = target_embedding(target)
    assert torch.allclose(embedding[ids[0]], first, atol=1e-5)
    if name.startswith("gemma"):
        assert not torch.allclose(target.get_input_embeddings().weight[ids[0]], first)  # a scale was applied
    references = [hf_greedy(target, p) for p in PROMPTS]
    sequences = [p + r for p, r in zip(PROMPTS, references)]
    longest = max(map(len, sequences))
    tokens = torch.tensor([s + [0] * (longest - len(s)) for s in sequences])
    valid = torch.tensor([[i < len(s) for i in range(longest)] for s in sequences])
    head = fitted_eagle_head(target, tokens, steps=150, lr=0.01, seed=1, valid=valid, noise=0.0, embedding=embedding)
    drafter = EagleDrafter(head, target.get_output_embeddings().weight, None,
                           TreeSpec(top_k=3, depth=3, total_tokens=8))
    deep = 0
    for prompt, reference in zip(PROMPTS, references):
        out = generate(target, prompt, drafter, Sampling(), TOKENS, set())
        assert out.token_ids == reference
        deep += sum(a >= 3 for a in out.accept_lengths)
    assert deep >= 4, f"only {deep} steps accepted two or more draft tokens"
