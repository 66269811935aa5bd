"""The small SpS draft trained here: distillation through the CLI, the compact shared-embedding format, and T=0
identity with vanilla when it drafts over a reduced vocabulary."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from specbench.cli import main
from specbench.decode.engine import generate
from specbench.decode.sampling import Sampling
from specbench.decode.target import chat_tokens, load_model
from specbench.method import BuildContext
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.run.registry import available_methods
from tests.conftest import write_prompts


@pytest.fixture(scope="module")
def trained(tiny_target_dir, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sps_train")
    prompts = write_prompts(folder / "prompts.jsonl", [f"tell me {i} things about the lazy dog" for i in range(24)])
    out = folder / "draft"
    code = main(["train", "sps-draft", "--target", str(tiny_target_dir), "--data", str(prompts), "--mode", "self",
                 "--prompts", "24", "--features", str(folder / "features"), "--out", str(out), "--max-tokens", "3000",
                 "--batch-tokens", "1024", "--opt", "layers=1", "--opt", "draft_vocab=120"])
    assert code == 0
    return out


def test_saved_without_the_shared_embedding(trained):
    keys = set(load_file(str(trained / "model.safetensors")))
    assert "model.embed_tokens.weight" not in keys and "lm_head.weight" not in keys
    assert "model.layers.0.self_attn.q_proj.weight" in keys
    assert len(json.loads((trained / "config.json").read_text())["specbench_draft_vocab"]) <= 120


@pytest.mark.parametrize("temperature", [0.0])
def test_t0_identity_with_reduced_vocabulary(tiny_target_dir, trained, temperature):
    target = load_model(str(tiny_target_dir))
    drafter = available_methods()["sps"].drafter(BuildContext(target, draft=str(trained)))
    assert drafter.draft_vocab is not None
    tokens = steps = 0
    for i in range(8):  # four new prompts, then four training prompts
        topic = "fox" if i < 4 else "lazy dog"
        prompt = chat_tokens(target.tokenizer, [{"role": "user", "content": f"tell me {i % 4} things about the {topic}"}])
        expected = generate(target.model, prompt, VanillaDrafter(), Sampling(), 30, set()).token_ids
        out = generate(target.model, prompt, drafter, Sampling(temperature), 30, set())
        assert out.token_ids == expected
        if i >= 4:
            tokens, steps = tokens + len(out.token_ids), steps + len(out.accept_lengths)
    print(f"sps: tau on training prompts {tokens / steps:.2f}")
    assert tokens / steps >= 1.5  # drafts were verified and accepted (τ 1.90 when written)
