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
from specbench.decode.engine import generate
from specbench.decode.sampling import Sampling
from specbench.decode.target import load_model
from specbench.methods.eagle.checkpoint import save_head
from specbench.methods.eagle.head import EagleHead, head_config
from specbench.methods.eagle3.checkpoint import head_config as eagle3_config
from specbench.methods.eagle3.checkpoint import save_head as save_eagle3
from specbench.methods.eagle3.head import Eagle3Head
from specbench.methods.eagle3.training import set_draft_vocabulary
from specbench.methods.medusa.checkpoint import save_heads
from specbench.methods.medusa.head import MedusaHeads
from specbench.methods.vanilla.drafter import VanillaDrafter
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
    vocab = target.config.vocab_size
    eagle3 = Eagle3Head(eagle3_config(target.config, vocab))
    eagle3.embed_tokens.weight.data.copy_(target.get_input_embeddings().weight)
    set_draft_vocabulary(eagle3, torch.arange(vocab))
    save_eagle3(eagle3, folder / "eagle3", dtype=torch.float32)
    return {"eagle": folder / "eagle", "medusa": folder / "medusa", "eagle3": folder / "eagle3"}


def decoded(out: Path) -> dict[tuple, tuple]:
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return {(r["method"], r["task"], r["temperature"], r["question_id"]):
            (r["choices"][0]["token_ids"], r["choices"][0]["accept_lengths"]) for r in records}


def run_beside_busy_processes(args: list[str], count: int = 2) -> int:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        return main(args)
    finally:
        for hog in hogs:
            hog.kill()


def test_same_tokens_and_accept_lengths_under_load(tiny_target_dir, tiny_draft_dir, random_heads, tmp_path,
                                                   monkeypatch, capsys):
    """Two fresh runs, each getting its costs the default way (no --cost-curve): the idle one measures them and
    stores them for this machine, the one beside two busy processes reuses them, so every cost-aware choice
    (eagle's and eagle3's tree sizes) is the same. The loaded run is warned about and says so in run.json."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    methods = (f"vanilla,pld,lookahead,sps,eagle@head={random_heads['eagle']},eagle1@head={random_heads['eagle']},"
               f"eagle3@head={random_heads['eagle3']},medusa@head={random_heads['medusa']}")
    common = ["--methods", methods, "--tasks", "gsm8k,mt_bench", "--limit", "1", "--temperatures", "0,1",
              "--draft", str(tiny_draft_dir)]
    idle = tmp_path / "idle"
    assert main(run_args(tiny_target_dir, idle, *common)) == 0
    if json.loads((idle / "run.json").read_text())["load"][0]["at_start"] > 0.25:
        pytest.skip("the machine was busy when the idle run started, so it stored no costs to reuse")
    if "refused" in json.loads((idle / "run.json").read_text())["costs"]["source"]:
        pytest.skip("load arrived while the idle run measured its costs, so it refused to store them")
    assert list((tmp_path / "cache" / "costs").glob("*.json")), "the idle run stored no costs"
    capsys.readouterr()
    loaded = tmp_path / "loaded"
    assert run_beside_busy_processes(run_args(tiny_target_dir, loaded, *common)) == 0
    assert "specbench: warning: other processes used" in capsys.readouterr().err
    first, second = decoded(idle), decoded(loaded)
    assert len(first) == 8 * 2 * 2 and first == second
    costs = json.loads((loaded / "run.json").read_text())["costs"]
    stored = json.loads((idle / "run.json").read_text())["costs"]
    assert costs.pop("source").startswith("stored: ") and stored.pop("source").startswith("measured at the run's start")
    assert costs == stored and len(costs["drafting_ms"]) == 2
    assert json.loads((loaded / "run.json").read_text())["load"][0]["at_start"] > 0.25
    capsys.readouterr()
    assert main(["check", str(idle), "--against", str(loaded)]) == 0
    assert capsys.readouterr().out.strip().endswith("identical apart from timings")
    lines = (loaded / "records.jsonl").read_text().splitlines()
    changed = json.loads(lines[-1])
    changed["choices"][0]["accept_lengths"][0] = [99]
    (loaded / "records.jsonl").write_text("\n".join([*lines[:-1], json.dumps(changed)]) + "\n")
    assert main(["check", str(idle), "--against", str(loaded)]) == 1
    assert "DIFFERENT" in capsys.readouterr().out


def test_a_run_started_beside_other_work_stores_no_costs(tiny_target_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "r"
    code = run_beside_busy_processes(run_args(tiny_target_dir, out, "--methods", "vanilla", "--tasks", "gsm8k",
                                              "--limit", "1", "--temperatures", "0"))
    err = capsys.readouterr().err
    assert code == 0 and err.count("specbench: warning: other processes used") == 1, err
    assert not [p for p in (tmp_path / "cache" / "costs").glob("*.json")]  # a measurement's samples go too
    log = json.loads((out / "run.json").read_text())["load"]
    assert len(log) == 1 and log[0]["at_start"] > 0.25
    header = (out / "report" / "speedup_T0.md").read_text().split("\n\n")[0]
    assert "WARNING: timed beside other work" in header


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
                           (["--question-dir", str(a), "--kernels", "stock"], "runtime"),
                           (["--question-dir", str(a), "--dtype", "bfloat16"], "dtype")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert setting in err.strip().splitlines()[-1], err
    info = json.loads((out / "run.json").read_text())
    info["environment"]["device"] = "cuda:0"  # as if the run had started on a GPU
    (out / "run.json").write_text(json.dumps(info))
    assert main([*base, "--question-dir", str(a)]) == 0  # finished: nothing is decoded, on any device
    assert "nothing to do" in capsys.readouterr().err
    more = run_args(tiny_target_dir, out, "--methods", "vanilla,pld", "--tasks", "gsm8k", "--temperatures", "0")
    assert main([*more, "--question-dir", str(a)]) == 2  # pld would decode on another device than vanilla did
    assert "device" in capsys.readouterr().err
    assert (out / "records.jsonl").read_text() == finished  # nothing finished is lost


def test_a_run_that_names_its_runtime_by_a_single_name_resumes_with_the_two_choices(tiny_target_dir, tmp_path, capsys):
    out = tmp_path / "r"
    base = run_args(tiny_target_dir, out, "--methods", "vanilla", "--tasks", "gsm8k", "--temperatures", "0")
    assert main([*base, "--limit", "1", "--runtime", "compiled"]) == 0
    info = json.loads((out / "run.json").read_text())
    assert info["settings"]["runtime"] == {"kernels": "auto", "graphs": "on"}
    info["settings"]["runtime"] = "compiled"  # as runs from before the two choices recorded it
    (out / "run.json").write_text(json.dumps(info))
    assert main([*base, "--limit", "2", "--graphs", "on"]) == 0
    assert len((out / "records.jsonl").read_text().splitlines()) == 2
    assert main([*base, "--limit", "2", "--graphs", "off"]) == 2
    assert "runtime" in capsys.readouterr().err


def test_a_prompt_past_the_context_yields_stop_reason_context(tiny_target_dir):
    target = load_model(str(tiny_target_dir))
    limit = target.model.config.max_position_embeddings
    full = generate(target.model, [5] * limit, VanillaDrafter(), Sampling(), 8, set())
    assert full.token_ids == [] and full.stop_reason == "context"
    almost = generate(target.model, [5] * (limit - 3), VanillaDrafter(), Sampling(), 8, set())
    assert len(almost.token_ids) == 3 and almost.stop_reason == "context"
