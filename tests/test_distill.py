"""Self-distilled training data in one pass (specbench distill): the target's own replies, batched; features from
the same forwards equal a fresh prefill's; resume; a second turn for a share; training from the dataset alone."""
from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from specbench.cli import main
from specbench.decode.engine import generate
from specbench.decode.sampling import Sampling
from specbench.decode.target import chat_tokens, load_model
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.train.dataset import finished_chunks
from specbench.train.distill import DistillConfig, answer_batch, length_batches
from specbench.train.features import (
    FeatureCache,
    add_layer_features,
    chunk_layers,
    target_features,
    target_layer_features,
)
from tests.conftest import write_prompts

WORDS = "the quick brown fox jumps over the lazy dog what is the answer".split()


def distill_args(folder, target_dir, turns: list[str], *extra: str) -> list[str]:
    """`specbench distill` over these prompts into folder/data, with features in folder/features."""
    prompts = write_prompts(folder / "prompts.jsonl", turns)
    return ["distill", "--target", str(target_dir), "--data", str(prompts), "--out", str(folder / "data"),
            "--features", str(folder / "features"), "--prompts", str(len(turns)), *extra]


@pytest.fixture(scope="module")
def distilled(tiny_target_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("distill")
    turns = [" ".join(WORDS[(3 * i + j) % len(WORDS)] for j in range(2 + i % 6)) for i in range(20)]
    args = distill_args(folder, tiny_target_dir, turns, "--reply-tokens", "24", "--batch-size", "6",
                        "--second-turn-share", "0.3")
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
        prompt = chat_tokens(target.tokenizer, [{"role": "user", "content": by_id[i]}])
        assert tokens[: len(prompt)] == prompt and sum(reply[: len(prompt)]) == 0
        vanilla = generate(target.model, prompt, VanillaDrafter(), Sampling(), 24, target.stop_ids).token_ids
        same += tokens[len(prompt):] == vanilla
    # Batched, left-padded decoding is the engine's greedy decoding up to float noise at near ties.
    assert same >= len(one_turn) - 1
    # Each chunk says where it was made (a GPU's fp32 may differ from a CPU's at a near tie).
    data, _ = conversations(folder)
    assert str(data["origin"]) == f"cpu, float32, torch {torch.__version__}"


def test_a_target_without_a_chat_template_is_distilled_from_its_plain_prompts(tiny_target_dir, tmp_path):
    """A base model (the packaged Gemma 3 270M has no chat template): prompts are the turns joined by blank lines,
    as `run` decodes them, and a second turn's prompt still holds the first reply, trained on."""
    base = tmp_path / "base"
    shutil.copytree(tiny_target_dir, base)
    (base / "chat_template.jinja").unlink()
    config = json.loads((base / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (base / "tokenizer_config.json").write_text(json.dumps(config))
    target = load_model(str(base))
    assert not target.tokenizer.chat_template
    turns = [" ".join(WORDS[(5 * i + j) % len(WORDS)] for j in range(3 + i % 4)) for i in range(6)]
    assert main(distill_args(tmp_path, base, turns, "--reply-tokens", "8", "--batch-size", "3",
                             "--second-turn-share", "1.0")) == 0
    _, convs = conversations(tmp_path)
    assert len(convs) == 6
    for tokens, reply, i in convs:
        first = target.tokenizer(turns[int(i)])["input_ids"]
        assert tokens[: len(first)] == first and sum(reply[: len(first)]) == 0
        runs = sum(1 for a, b in zip([0] + reply, reply) if b > a)
        assert runs == 2  # both replies are trained on


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


def test_rows_that_finish_early_leave_the_batch_and_every_token_gets_its_feature(tiny_target_dir, tmp_path):
    target = load_model(str(tiny_target_dir))
    turns = [" ".join(WORDS[(5 * i + j) % len(WORDS)] for j in range(1 + 3 * i)) for i in range(5)]
    prompts = [chat_tokens(target.tokenizer, [{"role": "user", "content": t}]) for t in turns]
    assert len({len(p) for p in prompts}) == 5  # left padding of different widths
    cfg = DistillConfig(data=tmp_path, out=tmp_path, target=str(tiny_target_dir), reply_tokens=20)
    # The random target seldom stops: make a token that some replies hold (and others lack) a stop token, so that
    # rows finish at different steps and leave the batch while others go on.
    free = answer_batch(target, prompts, cfg, None, False)
    assert all(r.hidden is None for r in free)
    held = {t: sum(t in r.reply[2:] for r in free) for r in free for t in r.reply[2:]}
    target.model.generation_config.eos_token_id = min(held, key=lambda t: (abs(held[t] - 2), t))
    rows = answer_batch(target, prompts, cfg, None, True)
    for row in rows:  # each row's features are a fresh prefill's of its conversation: no other row's mask or keys
        stored = row.hidden.float()
        assert len(stored) == len(row.prompt) + len(row.reply)  # every token fed, the last one included
        fresh = target_features(target, [row.prompt + row.reply])[0]
        torch.testing.assert_close(stored, fresh, atol=2e-3, rtol=2e-3)  # fp16 storage
    # The engine's greedy decoding (up to float noise at a near tie), and rows stopped at different steps.
    vanilla = [generate(target.model, p, VanillaDrafter(), Sampling(), 20, target.stop_ids).token_ids for p in prompts]
    assert sum(r.reply == v for r, v in zip(rows, vanilla)) >= len(prompts) - 1
    assert len({len(r.reply) for r in rows}) > 1


def test_sampled_replies_depend_on_their_seed_alone(tiny_target_dir, tmp_path):
    """At T > 0 each row draws from its own generator: a reply is the same decoded in a batch or alone."""
    target = load_model(str(tiny_target_dir))
    prompts = [chat_tokens(target.tokenizer, [{"role": "user", "content": " ".join(WORDS[i : i + 2 + i])}])
               for i in range(4)]
    cfg = DistillConfig(data=tmp_path, out=tmp_path, target=str(tiny_target_dir), reply_tokens=12, temperature=1.0)
    seeds = [10, 11, 12, 13]
    together = [r.reply for r in answer_batch(target, prompts, cfg, seeds, False)]
    alone = [answer_batch(target, [p], cfg, [s], False)[0].reply for p, s in zip(prompts, seeds)]
    assert together == alone
    again = [r.reply for r in answer_batch(target, prompts, cfg, [20, 21, 22, 23], False)]
    assert again != together  # other seeds, other samples


def test_length_batches_keep_long_prompts_apart():
    lengths = [10] * 20 + [25, 30, 100] + [12] * 3
    batches = length_batches(lengths, batch_size=16)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert [[lengths[i] for i in b] for b in batches] == [[10] * 16, [10] * 4 + [12] * 3 + [25, 30, 100]]
    assert length_batches([10] * 20 + [25], batch_size=64) == [list(range(20)), [20]]  # 25 > 2 x 10 after 16 rows
    assert length_batches([10] * 8 + [25], batch_size=64) == [list(range(9))]  # too few rows to split


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


def test_features_only_builds_the_cache_that_training_then_reads(distilled, tiny_target_dir, tmp_path, capsys):
    folder, _, _ = distilled
    args = ["train", "eagle", "--target", str(tiny_target_dir), "--dataset", str(folder / "data"),
            "--features", str(tmp_path / "features")]
    assert main([*args, "--features-only", "--out", str(tmp_path / "head")]) == 2  # one or the other
    assert "--features-only" in capsys.readouterr().err
    assert main([*args, "--features-only"]) == 0
    assert not (tmp_path / "head").exists()
    built = (tmp_path / "features" / "chunk_00000.safetensors").read_bytes()
    assert main([*args, "--out", str(tmp_path / "head"), "--max-tokens", "500", "--batch-tokens", "512",
                 "--opt", "draft_vocab=0"]) == 0
    assert (tmp_path / "features" / "chunk_00000.safetensors").read_bytes() == built  # read, not rebuilt
    assert json.loads((tmp_path / "head" / "log.jsonl").read_text().splitlines()[-1])["final"]


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_mixed_precision_training_keeps_fp32_weights(distilled, tiny_target_dir, tmp_path, method):
    folder, _, _ = distilled
    code = main(["train", method, "--target", str(tiny_target_dir), "--dataset", str(folder / "data"),
                 "--features", str(tmp_path / "features"), "--out", str(tmp_path / "head"), "--max-tokens", "1500",
                 "--batch-tokens", "512", "--autocast", "bfloat16"])
    assert code == 0
    final = json.loads((tmp_path / "head" / "log.jsonl").read_text().splitlines()[-1])
    assert final["final"] and all(np.isfinite(v) for k, v in final.items() if k.startswith("heldout_"))
    trained = torch.load(tmp_path / "head" / "checkpoint.pt", weights_only=False)["module"]  # what resumes
    assert {t.dtype for t in trained.values() if t.is_floating_point()} == {torch.float32}


def test_dataset_chunks_train_on_a_fixed_share_of_a_growing_dataset(distilled, tiny_target_dir, tmp_path, capsys):
    folder, _, _ = distilled
    dataset = tmp_path / "data"
    shutil.copytree(folder / "data", dataset)
    shutil.copy(dataset / "chunk_00000.npz", dataset / "chunk_00001.npz")  # the dataset grew by a chunk
    args = ["train", "eagle", "--target", str(tiny_target_dir), "--dataset", str(dataset), "--features",
            str(tmp_path / "features"), "--out", str(tmp_path / "head"), "--max-tokens", "500", "--batch-tokens",
            "512", "--opt", "draft_vocab=0"]
    assert main([*args, "--dataset-chunks", "1"]) == 0
    assert sorted(p.name for p in (tmp_path / "features").glob("chunk_*")) == ["chunk_00000.safetensors"]
    assert main([*args, "--dataset-chunks", "3"]) == 2
    assert "--dataset-chunks must be in 1..2" in capsys.readouterr().err


def test_shards_fill_one_dataset_with_the_chunks_one_process_writes(tiny_target_dir, tmp_path):
    turns = [" ".join(WORDS[(7 * i + j) % len(WORDS)] for j in range(2 + i % 4)) for i in range(10)]
    common = ("--reply-tokens", "8", "--batch-size", "3", "--chunk-size", "4", "--second-turn-share", "0.3")
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
    assert main(distill_args(tmp_path / "one", tiny_target_dir, turns, *common)) == 0
    two = tmp_path / "two"
    assert main(distill_args(two, tiny_target_dir, turns, *common, "--shard", "1/2")) == 0
    assert sorted(p.name for p in (two / "data").glob("chunk_*")) == ["chunk_00001.npz"]
    assert finished_chunks(two / "data") == []  # read as an unbroken prefix: chunk 0 is missing
    assert main(distill_args(two, tiny_target_dir, turns, *common, "--shard", "0/2")) == 0
    assert [p.name for p in finished_chunks(two / "data")] == ["chunk_00000.npz", "chunk_00001.npz",
                                                                "chunk_00002.npz"]
    for i in range(3):
        one_chunk, two_chunk = (np.load(f / "data" / f"chunk_{i:05d}.npz") for f in (tmp_path / "one", two))
        for key in ("tokens", "reply", "offsets", "ids"):
            assert np.array_equal(one_chunk[key], two_chunk[key]), (i, key)
        one_features, two_features = (load_file(str(f / "features" / f"chunk_{i:05d}.safetensors"))
                                      for f in (tmp_path / "one", two))
        assert torch.equal(one_features["hidden"], two_features["hidden"])


@pytest.fixture(scope="module")
def distilled_with_layers(tiny_target_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("distill_layers")
    turns = [" ".join(WORDS[(5 * i + j) % len(WORDS)] for j in range(2 + i % 5)) for i in range(10)]
    assert main(distill_args(folder, tiny_target_dir, turns, "--feature-layers", "0,1,2", "--reply-tokens", "12",
                             "--batch-size", "4")) == 0
    return folder


def test_feature_layers_are_kept_from_the_same_forwards(distilled_with_layers, tiny_target_dir):
    folder = distilled_with_layers
    target = load_model(str(tiny_target_dir))
    path = folder / "features" / "chunk_00000.safetensors"
    assert chunk_layers(path) == (0, 1, 2)
    chunk = load_file(str(path))
    offsets = chunk["offsets"].tolist()
    hidden_size = target.model.config.hidden_size
    assert chunk["fused"].shape == (offsets[-1], 3 * hidden_size)
    for a, b in zip(offsets, offsets[1:]):
        final, fused = target_layer_features(target, [chunk["tokens"][a:b].tolist()], (0, 1, 2))
        torch.testing.assert_close(chunk["fused"][a:b].float(), fused[0].float(), atol=2e-3, rtol=2e-3)
        torch.testing.assert_close(chunk["hidden"][a:b].float(), final[0], atol=2e-3, rtol=2e-3)


def test_layer_features_added_to_a_cache_equal_the_ones_kept_while_generating(distilled_with_layers, tiny_target_dir,
                                                                            tmp_path):
    target = load_model(str(tiny_target_dir))
    folder_chunk = distilled_with_layers / "features" / "chunk_00000.safetensors"
    plain = tmp_path / "cache"
    plain.mkdir()
    kept = load_file(str(folder_chunk))
    shutil.copy(distilled_with_layers / "features" / "manifest.json", plain / "manifest.json")
    save_file({k: v for k, v in kept.items() if k != "fused"}, str(plain / "chunk_00000.safetensors"),
              metadata={"rows": "10"})
    cache = FeatureCache(plain)
    assert chunk_layers(plain / "chunk_00000.safetensors") == ()
    add_layer_features(cache, target, (0, 1, 2), batch_size=3)
    added = load_file(str(plain / "chunk_00000.safetensors"))
    assert chunk_layers(plain / "chunk_00000.safetensors") == (0, 1, 2)
    for key in ("tokens", "loss_mask", "offsets", "hidden"):
        assert torch.equal(added[key], kept[key])
    torch.testing.assert_close(added["fused"].float(), kept["fused"].float(), atol=2e-3, rtol=2e-3)
    before = (plain / "chunk_00000.safetensors").stat().st_mtime_ns
    add_layer_features(cache, target, (0, 1, 2))  # already there: untouched
    assert (plain / "chunk_00000.safetensors").stat().st_mtime_ns == before


def test_features_rebuilt_for_eagle3_keep_the_fused_layers_from_the_same_prefill(distilled_with_layers,
                                                                               tiny_target_dir, tmp_path, capsys):
    from specbench.methods.eagle3.head import fused_layers

    target = load_model(str(tiny_target_dir))
    layers = fused_layers(target.model.config.num_hidden_layers)
    args = ["train", "eagle3", "--target", str(tiny_target_dir), "--dataset", str(distilled_with_layers / "data"),
            "--features", str(tmp_path / "features"), "--out", str(tmp_path / "head"), "--max-tokens", "300",
            "--batch-tokens", "256", "--feature-layers", ",".join(map(str, layers))]
    capsys.readouterr()
    assert main(args) == 0
    assert "features (layers" not in capsys.readouterr().err  # add_layer_features found nothing to add
    path = tmp_path / "features" / "chunk_00000.safetensors"
    assert chunk_layers(path) == layers
    rebuilt = load_file(str(path))
    offsets = rebuilt["offsets"].tolist()
    for a, b in zip(offsets, offsets[1:]):
        final, fused = target_layer_features(target, [rebuilt["tokens"][a:b].tolist()], layers)
        torch.testing.assert_close(rebuilt["fused"][a:b].float(), fused[0].float(), atol=2e-3, rtol=2e-3)
        torch.testing.assert_close(rebuilt["hidden"][a:b].float(), final[0], atol=2e-3, rtol=2e-3)
    assert json.loads((tmp_path / "head" / "log.jsonl").read_text().splitlines()[-1])["final"]
    assert main(["train", "eagle3", "--target", str(tiny_target_dir), "--out", str(tmp_path / "x"),
                 "--feature-layers", "0"]) == 2
    assert "--feature-layers go with --dataset" in capsys.readouterr().err


def test_eagle3_training_reads_cached_layers_instead_of_running_the_target(distilled_with_layers, tiny_target_dir):
    from specbench.methods.eagle3.checkpoint import head_config
    from specbench.methods.eagle3.head import Eagle3Head, fused_layers
    from specbench.methods.eagle3.training import Eagle3Trainable, set_draft_vocabulary
    from specbench.train.training import load_conversations, make_batch

    target = load_model(str(tiny_target_dir))
    layers = fused_layers(target.model.config.num_hidden_layers)
    cache = FeatureCache(distilled_with_layers / "features")
    add_layer_features(cache, target, layers)
    convs = load_conversations(cache)
    batch = make_batch(convs, list(range(4)))
    assert batch.fused_layers == layers and batch.fused is not None
    vocab = target.model.config.vocab_size
    head = Eagle3Head(head_config(target.model.config, vocab))
    set_draft_vocabulary(head, torch.arange(vocab))
    trainable = Eagle3Trainable(head, target.model)
    calls = []
    hook = target.model.register_forward_hook(lambda *_: calls.append(1))
    cached_fused, cached_logits = trainable._target(batch)
    assert calls == []  # no target forward
    ran_fused, ran_logits = trainable._target(dataclasses.replace(batch, fused=None, fused_layers=()))
    assert calls == [1]
    hook.remove()
    valid = batch.valid
    torch.testing.assert_close(cached_fused[valid], ran_fused[valid], atol=3e-3, rtol=3e-3)
    torch.testing.assert_close(cached_logits[valid], ran_logits[valid], atol=3e-3, rtol=3e-3)


@pytest.mark.parametrize("extra, message", [
    (["--feature-layers", "0,99"], "output_hidden_states indices"),
    (["--feature-layers", "a,b"], "not a comma-separated list"),
    (["--no-features", "--feature-layers", "0"], "goes with --features"),
])
def test_bad_feature_layers_are_one_line(tiny_target_dir, tmp_path, capsys, extra, message):
    prompts = write_prompts(tmp_path / "prompts.jsonl", ["the quick fox"])
    args = ["distill", "--target", str(tiny_target_dir), "--data", str(prompts), "--out", str(tmp_path / "data"),
            "--prompts", "1", "--reply-tokens", "4"]
    if extra[0] != "--no-features":
        args += ["--features", str(tmp_path / "features")]
    assert main(args + [e for e in extra if e != "--no-features"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and message in errors[0]  # (beside the model-loading progress bars)
    assert not (tmp_path / "data").exists()
