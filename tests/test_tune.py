"""`tune`: every method's declared settings decoded on the development split (the last questions of each task),
the fastest kept per method and temperature, and `run --settings` applying them to other questions only."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbench.cli import main
from specbench.method import TUNING_BUDGET
from specbench.run.records import read_records
from specbench.run.registry import available_methods
from specbench.run.settings import read_settings
from specbench.run.tasks import QuestionSelection, resolve_questions
from tests.test_cli import bad_input


@pytest.fixture(scope="module")
def tuned(tiny_target_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tune") / "t"
    assert main(["tune", "--target", str(tiny_target_dir), "--out", str(out), "--methods", "pld,lookahead",
                 "--tasks", "gsm8k,alpaca", "--dev-questions", "2", "--max-new-tokens", "10",
                 "--temperatures", "0"]) == 0
    return out


def test_every_method_declares_its_defaults_first_within_the_budget():
    for info in available_methods().values():
        assert len(info.tuning) <= TUNING_BUDGET, info.name
        assert not info.tuning or info.tuning[0] == "", f"{info.name}: the defaults are the first setting"
    assert available_methods()["lookahead"].tuning  # the example: lookahead's window is tuned


def test_tune_decodes_every_setting_on_the_last_questions(tuned):
    settings = read_settings(tuned / "settings.yaml")
    tried = settings.candidates["0.0"]
    assert [r["options"] for r in tried["pld"]] == list(available_methods()["pld"].tuning)
    assert len(tried["lookahead"]) == len(available_methods()["lookahead"].tuning)
    for method, rows in tried.items():  # the chosen setting is the fastest one tried
        best = max(rows, key=lambda r: r["speedup"])
        assert settings.chosen["0.0"][method] == best["options"]
    last_two = {t.name: [str(q.question_id) for q in qs[-2:]]
                for t, qs in resolve_questions(QuestionSelection(tasks=["gsm8k", "alpaca"]))}
    assert settings.dev_questions == last_two
    decoded = {(r.method, r.task, str(r.question_id)) for r in read_records(tuned)}
    assert ("vanilla", "gsm8k", last_two["gsm8k"][0]) in decoded
    assert len(decoded) == 2 * 2 * (1 + 4 + 4)  # tasks x questions x (vanilla + each setting)
    assert settings.budget == {"settings_per_method": TUNING_BUDGET, "questions_per_task": 2}


def test_run_with_settings_applies_them_to_other_questions(tuned, tiny_target_dir, tmp_path, capsys):
    settings = read_settings(tuned / "settings.yaml")
    out = tmp_path / "r"
    assert main(["run", "--target", str(tiny_target_dir), "--out", str(out), "--report-dir", str(out / "report"),
                 "--methods", "pld,lookahead", "--tasks", "gsm8k,alpaca", "--limit", "2", "--max-new-tokens", "10",
                 "--temperatures", "0", "--settings", str(tuned / "settings.yaml")]) == 0
    methods = {r.method for r in read_records(out)}
    for method in ("pld", "lookahead"):
        choice = settings.chosen["0.0"][method]
        assert (f"{method}@{choice}" if choice else method) in methods
    assert json.loads((out / "run.json").read_text())["settings"]["settings_file"] == str(tuned / "settings.yaml")
    # Evaluating a question the settings were tuned on is refused before anything is decoded.
    line = bad_input(capsys, ["run", "--target", str(tiny_target_dir), "--out", str(tmp_path / "x"),
                              "--methods", "pld", "--tasks", "gsm8k", "--temperatures", "0",
                              "--settings", str(tuned / "settings.yaml")])
    assert "was tuned on gsm8k question" in line and not (tmp_path / "x").exists()
    budget = (out / "report" / "budget.md").read_text()
    assert budget.count("tuned by `tune`") == 2 and "development split: gsm8k" in budget
    line = bad_input(capsys, ["run", "--target", str(tiny_target_dir), "--out", str(tmp_path / "y"),
                              "--methods", "pld", "--tasks", "gsm8k", "--limit", "1", "--temperatures", "0,1",
                              "--settings", str(tuned / "settings.yaml")])
    assert "not at T=1" in line


def test_tune_refuses_options_and_a_missing_split(tiny_target_dir, tmp_path, capsys):
    line = bad_input(capsys, ["tune", "--target", str(tiny_target_dir), "--out", str(tmp_path / "t"),
                              "--methods", "pld@num_tokens=3", "--tasks", "gsm8k"])
    assert "is what tune chooses" in line
    (tmp_path / "bad.yaml").write_text("chosen: 3\n")
    line = bad_input(capsys, ["run", "--target", str(tiny_target_dir), "--out", str(tmp_path / "r"),
                              "--methods", "pld", "--settings", str(tmp_path / "bad.yaml")])
    assert "not a settings file" in line


def test_fixed_options_stay_fixed_and_merge_with_the_tuned_ones(tmp_path):
    from specbench.measure.tune import candidates
    from specbench.run.settings import TunedSettings, apply_settings

    assert [spec for _, spec in candidates(["pld@max_ngram=2"])["pld@max_ngram=2"]] == [
        "pld@max_ngram=2", "pld@max_ngram=2:num_tokens=2", "pld@max_ngram=2:num_tokens=4", "pld@max_ngram=2:num_tokens=6"]
    tuned = TunedSettings("t", {"0.0": {"pld": "num_tokens=4", "lookahead": ""}}, {})
    assert apply_settings(["pld@head=/x", "lookahead", "vanilla", "pld@num_tokens=9"], [0.0], tuned, tmp_path) == [
        "pld@head=/x:num_tokens=4", "lookahead", "vanilla", "pld@num_tokens=9"]


def test_a_method_and_its_variant_are_tuned_side_by_side_each_under_its_own_key(tmp_path):
    from specbench.measure.tune import candidates
    from specbench.run.settings import TunedSettings, apply_settings

    tried = candidates(["pld", "pld@rule=hf", "eagle@head=/h"])
    assert list(tried) == ["pld", "pld@rule=hf", "eagle"]  # head= is not a variant: the same method's other weights
    assert tried["pld@rule=hf"][1][1] == "pld@rule=hf:num_tokens=2"
    tuned = TunedSettings("t", {"0.0": {"pld": "num_tokens=4", "pld@rule=hf": "num_tokens=6"}}, {})
    assert apply_settings(["pld", "pld@rule=hf"], [0.0], tuned, tmp_path) == [
        "pld@num_tokens=4", "pld@rule=hf:num_tokens=6"]
