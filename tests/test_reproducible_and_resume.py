"""Reproducibility (the same seed, settings and costs give the same token ids and accept lengths on an idle or a
loaded machine), resume refusals, and a turn whose prompt no longer fits the context."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specbench.cli import main
from specbench.engine import generate
from specbench.methods.eagle import EagleHead, head_config, save_head
from specbench.methods.medusa import MedusaHeads, save_heads
from specbench.methods.vanilla import VanillaDrafter
from specbench.sampling import Sampling
from specbench.target import load_model
from tests.test_cli import run_args, write_questions


@pytest.fixture(scope="module")
def random_heads(tiny_target_dir, tmp_path_factory) -> dict[str, Path]:
    """Untrained EAGLE and Medusa heads for the tiny target: enough for the drafting decisions to matter."""
    folder = tmp_path_factory.mktemp("heads")
    target = load_model(str(tiny_target_dir)).model
    torch.manual_seed(0)
    head = EagleHead(head_config(target.config))
    save_head(head, folder / "eagle", None, dtype=torch.float32)
    medusa = MedusaHeads(target.config.hidden_size, 4)
    for block in medusa.heads:
        torch.nn.init.normal_(block[0].linear.weight, std=0.5)
    save_heads(medusa, folder / "medusa", None)
    return {"eagle": folder / "eagle", "medusa": folder / "medusa"}


def decoded(out: Path) -> dict[tuple, tuple]:
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return {(r["method"], r["task"], r["temperature"], r["question_id"]):
            (r["choices"][0]["token_ids"], r["choices"][0]["accept_lengths"]) for r in records}


def test_same_tokens_and_accept_lengths_under_load(tiny_target_dir, tiny_draft_dir, random_heads, tmp_path):
    methods = (f"vanilla,pld,lookahead,sps,eagle@head={random_heads['eagle']},eagle1@head={random_heads['eagle']},"
               f"medusa@head={random_heads['medusa']}")
    common = ["--methods", methods, "--tasks", "gsm8k,mt_bench", "--limit", "1", "--temperatures", "0,1",
              "--draft", str(tiny_draft_dir)]
    idle = tmp_path / "idle"
    assert main(run_args(tiny_target_dir, idle, *common)) == 0
    # eagle sizes its trees from the run's costs (total_tokens=auto): the second run reuses the first's, and
    # decodes beside two busy processes. Nothing that decides a draft may read the clock while decoding.
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        loaded = tmp_path / "loaded"
        assert main(run_args(tiny_target_dir, loaded, *common, "--cost-curve", str(idle / "run.json"))) == 0
    finally:
        for hog in hogs:
            hog.kill()
    first, second = decoded(idle), decoded(loaded)
    assert len(first) == 7 * 2 * 2 and first == second
    costs = json.loads((loaded / "run.json").read_text())["costs"]
    assert costs == json.loads((idle / "run.json").read_text())["costs"] and costs["drafting_ms"]


def test_bad_cost_curve_is_one_line(tiny_target_dir, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"target": "someone/else", "sizes": [1, 2], "verify_ms": [1.0, 2.0]}))
    for path, message in ((tmp_path / "missing.json", "no such file"), (bad, "not JSON"),
                          (other, "measured for target 'someone/else'")):
        code = main(run_args(tiny_target_dir, tmp_path / "r", "--methods", "vanilla", "--cost-curve", str(path)))
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r" / "records.jsonl").exists()


def test_resume_refuses_changed_questions_runtime_and_device(tiny_target_dir, tmp_path, capsys):
    a = write_questions(tmp_path / "a", "gsm8k", ['{"question_id": 1, "category": "math", "turns": ["one plus one"]}'])
    b = write_questions(tmp_path / "b", "gsm8k", ['{"question_id": 1, "category": "math", "turns": ["two plus two"]}'])
    out = tmp_path / "r"
    base = run_args(tiny_target_dir, out, "--methods", "vanilla", "--tasks", "gsm8k", "--temperatures", "0")
    assert main([*base, "--question-dir", str(a)]) == 0
    finished = (out / "records.jsonl").read_text()
    for extra, setting in ((["--question-dir", str(b)], "question_dir"),
                           (["--question-dir", str(a), "--runtime", "stock"], "runtime"),
                           (["--question-dir", str(a), "--dtype", "bfloat16"], "dtype")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert setting in err.strip().splitlines()[-1], err
    info = json.loads((out / "run.json").read_text())
    info["environment"]["device"] = "cuda:0"  # as if the run had started on a GPU
    (out / "run.json").write_text(json.dumps(info))
    assert main([*base, "--question-dir", str(a)]) == 2
    assert "device" in capsys.readouterr().err
    assert (out / "records.jsonl").read_text() == finished  # nothing finished is lost


def test_a_prompt_past_the_context_yields_stop_reason_context(tiny_target_dir):
    target = load_model(str(tiny_target_dir))
    limit = target.model.config.max_position_embeddings
    full = generate(target.model, [5] * limit, VanillaDrafter(), Sampling(), 8, set())
    assert full.token_ids == [] and full.stop_reason == "context"
    almost = generate(target.model, [5] * (limit - 3), VanillaDrafter(), Sampling(), 8, set())
    assert len(almost.token_ids) == 3 and almost.stop_reason == "context"
