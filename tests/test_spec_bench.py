"""Question files as tasks (Spec-Bench's format), suites, user task files, question ranges, vanilla as the
automatic baseline, the per-category and leaderboard tables, and the Spec-Bench export.

Spec-Bench's own evaluation/speed.py and equal.py are run on the export when SPEC_BENCH_DIR names a checkout
(scripts/check_spec_bench_export.py does the same by hand); without it the export is checked against the records."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from specbench.cli import main
from specbench.run.records import read_records
from specbench.run.tasks import QuestionSelection, resolve_questions
from tests.test_cli import bad_input

# Spec-Bench's layout in miniature: MT-bench categories with two turns, then single-turn tasks.
ROWS = [
    {"question_id": 81, "category": "writing", "turns": ["what is the answer?", "the quick brown fox"]},
    {"question_id": 82, "category": "math", "turns": ["the lazy dog", "what is the answer?"]},
    {"question_id": 83, "category": "translation", "turns": ["the quick brown fox jumps over the lazy dog"]},
    {"question_id": 84, "category": "translation", "turns": ["what is the quick fox?"]},
    {"question_id": 85, "category": "qa", "turns": ["what is the answer? the answer"]},
]


def question_file(folder: Path, rows: list[dict] = ROWS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "question.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def names(selection: QuestionSelection) -> dict[str, list]:
    return {task.name: [q.question_id for q in qs] for task, qs in resolve_questions(selection)}


def test_categories_become_tasks_and_a_map_or_suite_groups_them(tmp_path):
    f = question_file(tmp_path)
    assert names(QuestionSelection(question_files=[f])) == {
        "writing": [81], "math": [82], "translation": [83, 84], "qa": [85]}
    assert names(QuestionSelection(question_files=[f], category_map={"mt_bench": ["writing", "math"]})) == {
        "mt_bench": [81, 82], "translation": [83, 84], "qa": [85]}
    suite = resolve_questions(QuestionSelection(question_files=[f], suite="spec-bench"))
    assert [(t.name, t.max_new_tokens) for t, _ in suite] == [
        ("mt_bench", 1024), ("translation", 1024), ("qa", 1024)]  # absent tasks (rag ...) drop out
    # --limit: the first N of each task in file order; begin/end: a slice of the file's lines, as Spec-Bench.
    assert names(QuestionSelection(question_files=[f], suite="spec-bench", limit=1)) == {
        "mt_bench": [81], "translation": [83], "qa": [85]}
    assert names(QuestionSelection(question_files=[f], suite="spec-bench", begin=1, end=3)) == {
        "mt_bench": [82], "translation": [83]}
    assert names(QuestionSelection(question_files=[f], suite="spec-bench", tasks=["qa"])) == {"qa": [85]}


def test_spec_bench_suite_reads_a_question_dir_and_has_embedded_samples(tmp_path):
    question_file(tmp_path / "spec_bench")
    assert names(QuestionSelection(suite="spec-bench", question_dir=tmp_path, tasks=["mt_bench", "qa"])) == {
        "mt_bench": [81, 82], "qa": [85]}
    embedded = resolve_questions(QuestionSelection(suite="spec-bench"))
    assert [t.name for t, _ in embedded] == ["mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"]
    assert all(qs for _, qs in embedded)


def test_bad_question_selections_are_one_line_and_write_nothing(tiny_target_dir, tmp_path, capsys):
    good = question_file(tmp_path / "good")
    no_category = question_file(tmp_path / "bad", [{"question_id": 1, "turns": ["hello"]}])
    out = tmp_path / "never"
    cases = {
        "unknown category": (["--question-file", str(good), "--tasks", "rag"], "unknown task rag"),
        "no category": (["--question-file", str(no_category)], "no 'category'"),
        "map names absent": (["--question-file", str(good), "--category-map", "mt_bench=writing,roleplay"],
                             "no category roleplay"),
        "malformed map": (["--question-file", str(good), "--category-map", "mt_bench"], "expected NAME=CATEGORY"),
        "begin after end": (["--question-file", str(good), "--question-begin", "3", "--question-end", "1"],
                            "--question-begin 3 is after --question-end 1"),
        "unknown suite": (["--suite", "nope"], "unknown suite"),
        "map without file": (["--category-map", "a=b"], "goes with --question-file"),
        "missing task file": (["--task-file", str(tmp_path / "none.yaml")], "no such file"),
    }
    for name, (extra, expected) in cases.items():
        err = bad_input(capsys, ["run", "--target", str(tiny_target_dir), "--out", str(out), "--methods", "pld",
                                 "--report-dir", str(tmp_path / "rep"), *extra])
        assert expected in err, (name, err)
        assert not out.exists() and not (tmp_path / "rep").exists(), name


def test_user_task_file_with_its_own_questions(tmp_path):
    folder = tmp_path / "mytask"
    question_file(folder, ROWS[2:4])
    (folder / "task.yaml").write_text(
        "name: my_translation\ndescription: my own task\nquestion_file: question.jsonl\nmax_new_tokens: 7\n")
    [(task, questions)] = resolve_questions(QuestionSelection(tasks=["my_translation"],
                                                              task_files=[folder / "task.yaml"]))
    assert task.max_new_tokens == 7 and [q.question_id for q in questions] == [83, 84]
    (folder / "bad.yaml").write_text("name: x\nmax_new_tokens: 7\nquestions: []\n")
    with pytest.raises(Exception, match="unknown key questions"):
        resolve_questions(QuestionSelection(task_files=[folder / "bad.yaml"]))


@pytest.fixture(scope="module")
def spec_bench_run(tiny_target_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("specbench")
    f = question_file(root / "q")
    out = root / "run"
    code = main(["run", "--target", str(tiny_target_dir), "--out", str(out), "--report-dir", str(root / "report"),
                 "--methods", "pld", "--suite", "spec-bench", "--question-file", str(f), "--max-new-tokens", "24",
                 "--temperatures", "0"])
    assert code == 0
    return root, out


def test_vanilla_runs_as_the_baseline_and_reports_break_down(spec_bench_run, tiny_target_dir, tmp_path, capsys):
    root, out = spec_bench_run
    records = read_records(out)
    assert {r.method for r in records} == {"vanilla", "pld"}
    assert {(r.task, r.category) for r in records} == {
        ("mt_bench", "writing"), ("mt_bench", "math"), ("translation", "translation"), ("qa", "qa")}
    leaderboard = (root / "report" / "leaderboard_T0.md").read_text()
    assert "Overall Speedup" in leaderboard and "| pld" in leaderboard
    for suffix in ("md", "tex", "csv"):
        assert (root / "report" / f"leaderboard_T0.{suffix}").is_file()
        assert (root / "report" / f"categories_mt_bench_T0.{suffix}").is_file()
    assert "writing Speedup" in (root / "report" / "categories_mt_bench_T0.md").read_text()
    # --no-baseline: only what is listed.
    alone = tmp_path / "alone"
    assert main(["run", "--target", str(tiny_target_dir), "--out", str(alone), "--report-dir", str(tmp_path / "r"),
                 "--methods", "pld", "--no-baseline", "--question-file", str(root / "q" / "question.jsonl"),
                 "--tasks", "qa", "--max-new-tokens", "8", "--temperatures", "0"]) == 0
    assert {r.method for r in read_records(alone)} == {"pld"}


def test_spec_bench_export(spec_bench_run, tmp_path):
    root, out = spec_bench_run
    export = tmp_path / "export"
    assert main(["export", str(out), "--format", "spec-bench", "--out", str(export)]) == 0
    files = sorted(export.glob("*.jsonl"))
    assert [f.name.split("-temp-")[0].rsplit("-", 2)[1] for f in files] == ["pld", "vanilla"]
    records = {(r.method, r.question_id): r for r in read_records(out)}
    for f in files:
        answers = [json.loads(line) for line in f.read_text().splitlines()]
        assert [a["question_id"] for a in answers] == [81, 82, 83, 84, 85]  # sorted as Spec-Bench sorts
        method = "pld" if "-pld-" in f.name else "vanilla"
        for a in answers:
            assert set(a) == {"question_id", "category", "answer_id", "model_id", "choices", "tstamp"}
            choice, record = a["choices"][0], records[(method, a["question_id"])].choice
            assert choice["turns"] == record.turns and choice["new_tokens"] == record.new_tokens
            assert all(isinstance(x, int) for x in choice["accept_lengths"])  # one flat list
            assert sum(choice["accept_lengths"]) == sum(choice["new_tokens"])
        if method == "pld":
            flat = [x for a in answers for x in a["choices"][0]["accept_lengths"]]
            tau = sum(sum(r.choice.new_tokens) for k, r in records.items() if k[0] == "pld") / sum(
                sum(r.choice.decoding_steps) for k, r in records.items() if k[0] == "pld")
            assert np.mean(flat) == pytest.approx(tau, rel=1e-12)  # speed.py's τ is ours
            assert max(flat) > 1  # pld's drafts were accepted
    prediction = json.loads((export / "speed_prediction.json").read_text())
    assert {r["task"] for r in prediction} == {"mt_bench", "translation", "qa", "overall"}
    assert (export / "tokenizer" / "tokenizer.json").is_file()
    spec_bench = os.environ.get("SPEC_BENCH_DIR")
    if spec_bench:  # Spec-Bench's own code on the export
        import subprocess
        import sys

        result = subprocess.run([sys.executable, "scripts/check_spec_bench_export.py", "--spec-bench", spec_bench,
                                 "--export", str(export)], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parents[1])
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Result totally Equal!" in result.stdout
