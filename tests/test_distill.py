"""Self-distilled training data in one pass (specbench distill): the target's own replies, batched; features from
the same forwards equal a fresh prefill's; resume; a second turn for a share; training from the dataset alone."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from specbench.cli import main
from specbench.engine import generate
from specbench.features import target_features
from specbench.methods.vanilla import VanillaDrafter
from specbench.sampling import Sampling
from specbench.target import chat_prompt, load_model
from tests.conftest import write_prompts

WORDS = "the quick brown fox jumps over the lazy dog what is the answer".split()


@pytest.fixture(scope="module")
def distilled(tiny_target_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("distill")
    turns = [" ".join(WORDS[(3 * i + j) % len(WORDS)] for j in range(2 + i % 6)) for i in range(20)]
    prompts = write_prompts(folder / "prompts.jsonl", turns)
    args = ["distill", "--target", str(tiny_target_dir), "--data", str(prompts), "--out", str(folder / "data"),
            "--features", str(folder / "features"), "--prompts", "20", "--reply-tokens", "24", "--batch-size", "6",
            "--second-turn-share", "0.3"]
    assert main(args) == 0
    return folder, args, turns


def conversations(folder):
    data = dict(np.load(folder / "data" / "chunk_00000.npz"))
    offsets = data["offsets"].tolist()
    return data, [(data["tokens"][a:b].astype(np.int64).tolist(), data["reply"][a:b].tolist(), str(data["ids"][i]))
                  for i, (a, b) in enumerate(zip(offsets, offsets[1:]))]


def test_replies_are_what_the_target_writes(distilled, tiny_target_dir):
    folder, _, turns = distilled
    target = load_model(str(tiny_target_dir))
    _, convs = conversations(folder)
    assert len(convs) == 20
    by_id = {str(i): t for i, t in enumerate(turns)}
    one_turn = [(tokens, reply, i) for tokens, reply, i in convs if sum(1 for a, b in zip(reply, reply[1:]) if b > a) == 1]
    two_turns = len(convs) - len(one_turn)
    assert 2 <= two_turns <= 12  # about 30% get a follow-up turn and a second reply
    same = 0
    for tokens, reply, i in one_turn:
        prompt = chat_prompt(target.tokenizer, [{"role": "user", "content": by_id[i]}])
        assert tokens[: len(prompt)] == prompt and sum(reply[: len(prompt)]) == 0
        vanilla = generate(target.model, prompt, VanillaDrafter(), Sampling(), 24, target.stop_ids).token_ids
        same += tokens[len(prompt):] == vanilla
    # Batched, left-padded decoding is the engine's greedy decoding up to float noise at near ties.
    assert same >= len(one_turn) - 1


def test_features_from_the_same_forwards_equal_a_fresh_prefill(distilled, tiny_target_dir):
    folder, _, _ = distilled
    target = load_model(str(tiny_target_dir))
    data, convs = conversations(folder)
    chunk = load_file(str(folder / "features" / "chunk_00000.safetensors"))
    assert torch.equal(chunk["tokens"], torch.from_numpy(data["tokens"].astype(np.int32)))
    offsets = chunk["offsets"].tolist()
    for k, (tokens, reply, _) in enumerate(convs):
        fresh = target_features(target, [tokens])[0]
        stored = chunk["hidden"][offsets[k] : offsets[k + 1]].float()
        torch.testing.assert_close(stored, fresh, atol=2e-3, rtol=2e-3)  # fp16 storage
        assert chunk["loss_mask"][offsets[k] : offsets[k + 1]].tolist() == reply[1:] + [0]


def test_rerun_resumes_and_changed_settings_are_refused(distilled, capsys):
    folder, args, _ = distilled
    before = (folder / "data" / "chunk_00000.npz").read_bytes()
    assert main(args) == 0  # nothing left to do
    assert (folder / "data" / "chunk_00000.npz").read_bytes() == before
    assert main([*args[:-1], "0.5"]) == 2
    assert "second_turn_share" in capsys.readouterr().err


def test_train_from_the_dataset_alone_rebuilds_features(distilled, tiny_target_dir, tmp_path):
    folder, _, _ = distilled
    code = main(["train", "eagle", "--target", str(tiny_target_dir), "--dataset", str(folder / "data"),
                 "--features", str(tmp_path / "features"), "--out", str(tmp_path / "head"), "--max-tokens", "2000",
                 "--batch-tokens", "512", "--opt", "draft_vocab=0"])
    assert code == 0
    rebuilt = load_file(str(tmp_path / "features" / "chunk_00000.safetensors"))
    during = load_file(str(folder / "features" / "chunk_00000.safetensors"))
    assert torch.equal(rebuilt["tokens"], during["tokens"]) and torch.equal(rebuilt["loss_mask"], during["loss_mask"])
    torch.testing.assert_close(rebuilt["hidden"].float(), during["hidden"].float(), atol=2e-3, rtol=2e-3)
    assert json.loads((tmp_path / "head" / "log.jsonl").read_text().splitlines()[-1])["final"]
