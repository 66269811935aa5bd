"""Tiny randomly initialised Llama models and a tiny tokenizer, built offline, for fast tests."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

# No test may touch the network: every model and dataset here is built locally.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Costs measured by test runs are stored for this session only, never in the user's cache (specbench.run.cost_store).
os.environ["SPECBENCH_CACHE"] = tempfile.mkdtemp(prefix="specbench-test-cache-")

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def pytest_sessionfinish(session, exitstatus) -> None:
    """The session's cost store goes with the session (it would otherwise stay in the temp folder, tens of MB a run)."""
    shutil.rmtree(os.environ["SPECBENCH_CACHE"], ignore_errors=True)


def tiny_llama(vocab: int, seed: int, layers: int = 2, hidden: int = 32, logit_scale: float = 1.0,
               context: int = 256) -> LlamaForCausalLM:
    """A random Llama; logit_scale sharpens its distributions so sampling tests see varied, peaked rows."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
    return model


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_tokenizer(vocab_size: int, corpus_seed: str = "abc"):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    corpus = [f"{corpus_seed} the quick brown fox jumps over the lazy dog; what is the answer? " * 3] * 20
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|im_end|>")
    fast.chat_template = CHATML
    return fast


def save_tiny_target(folder: Path, vocab_size: int, seed: int, corpus_seed: str = "abc", context: int = 512,
                     logit_scale: float = 4.0) -> Path:
    tokenizer = tiny_tokenizer(vocab_size, corpus_seed)
    model = tiny_llama(len(tokenizer), seed, context=context, logit_scale=logit_scale)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_prompts(path: Path, first_turns: list[str]) -> Path:
    """A training-prompts file in the ../shared/data/train format (turns only: for --mode self)."""
    import json

    path.write_text("".join(json.dumps({"id": str(i), "turns": [t]}) + "\n" for i, t in enumerate(first_turns)))
    return path


@pytest.fixture(scope="session")
def tiny_target_dir(tmp_path_factory) -> Path:
    return save_tiny_target(tmp_path_factory.mktemp("tiny_target"), 300, seed=1)


@pytest.fixture(scope="session")
def tiny_draft_dir(tmp_path_factory) -> Path:
    """Same tokenizer as the tiny target, other weights."""
    return save_tiny_target(tmp_path_factory.mktemp("tiny_draft"), 300, seed=2)


@pytest.fixture(scope="session")
def other_tokenizer_dir(tmp_path_factory) -> Path:
    return save_tiny_target(tmp_path_factory.mktemp("other_tok"), 290, seed=3, corpus_seed="xyz")
