"""SPEED-Bench as two suites: `speed-bench` (the qualitative split, one task per category) and
`speed-bench-throughput` (the throughput split, one task per input-length bucket), read in the dataset's own schema
from the fixture under tests/fixtures/speed_bench (text written for the tests), from NVIDIA's prepared files
(`messages` in place of `turns`), or from the HF dataset through the tasks' field mapping; offline without files,
one error line names the dataset."""
from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import pytest

from specbench.analysis.tables import display_names
from specbench.cli import main
from specbench.run.records import read_records
from specbench.run.tasks import QuestionSelection, available_tasks, load_questions, resolve_questions
from tests.test_cli import bad_input

FIXTURES = Path(__file__).resolve().parent / "fixtures"
QUALITATIVE = FIXTURES / "speed_bench" / "qualitative.jsonl"
CATEGORIES = ["coding", "humanities", "math", "multilingual", "qa", "rag", "reasoning", "roleplay", "stem",
              "summarization", "writing"]


def fixture_rows() -> list[dict]:
    return [json.loads(line) for line in QUALITATIVE.read_text(encoding="utf-8").splitlines()]


def ids(selection: QuestionSelection) -> dict[str, list[str]]:
    return {task.name: [q.question_id for q in qs] for task, qs in resolve_questions(selection)}


def test_the_fixture_is_in_the_datasets_schema_and_each_category_is_a_task(capsys):
    fields = {"question_id", "category", "sub_category", "turns", "source", "src_id", "difficulty", "multiturn"}
    rows = fixture_rows()
    assert all(set(r) == fields and len(r["question_id"]) == 32 for r in rows)
    assert sorted({r["category"] for r in rows}) == CATEGORIES
    placeholder = available_tasks("speed-bench")["summarization"].placeholder
    published = [r["question_id"] for r in rows if not r["turns"][0].startswith(placeholder)]
    expected = {c: [r["question_id"] for r in rows if r["category"] == c and r["question_id"] in published]
                for c in CATEGORIES}
    capsys.readouterr()
    assert ids(QuestionSelection(suite="speed-bench", question_dir=FIXTURES)) == expected
    assert "task summarization: 1 of 3 questions skipped: the dataset publishes them with a placeholder" in (
        capsys.readouterr().err)
    # The same file as --question-file: its categories are the suite's tasks; --limit counts prompts, not placeholders.
    assert ids(QuestionSelection(suite="speed-bench", question_files=[QUALITATIVE])) == expected
    assert ids(QuestionSelection(suite="speed-bench", question_dir=FIXTURES, limit=1, tasks=["summarization"])) == {
        "summarization": expected["summarization"][:1]}
    [(roleplay, questions)] = resolve_questions(QuestionSelection(suite="speed-bench", question_dir=FIXTURES,
                                                                  tasks=["roleplay"]))
    assert roleplay.max_new_tokens == 4096 and len(questions[0].turns) == 2  # multi-turn rows keep their turns


def test_prepared_files_with_messages_read_as_the_same_questions(tmp_path):
    """NVIDIA's prepare.py writes each row's turns as user `messages`; those files read as the same questions."""
    folder = tmp_path / "speed_bench"
    folder.mkdir()
    with (folder / "qualitative.jsonl").open("w", encoding="utf-8") as f:
        for row in fixture_rows():
            turns = row.pop("turns")
            f.write(json.dumps(row | {"messages": [{"role": "user", "content": t} for t in turns]}) + "\n")
    selection = QuestionSelection(suite="speed-bench", question_dir=tmp_path, tasks=["roleplay", "writing"])
    reference = QuestionSelection(suite="speed-bench", question_dir=FIXTURES, tasks=["roleplay", "writing"])
    assert [qs for _, qs in resolve_questions(selection)] == [qs for _, qs in resolve_questions(reference)]


def test_the_hf_path_reads_the_split_by_category(tmp_path):
    """The tasks' HF mapping on a local copy laid out as the dataset's repository (a config named qualitative with a
    test split): each task takes its category before --limit, and placeholder rows are skipped."""
    pytest.importorskip("datasets")
    shutil.copy(QUALITATIVE, tmp_path / "qualitative.jsonl")
    (tmp_path / "README.md").write_text("---\nconfigs:\n- config_name: qualitative\n  data_files:\n  - split: test\n"
                                        "    path: qualitative.jsonl\n---\n", encoding="utf-8")
    rows = fixture_rows()
    for name in ("summarization", "writing"):
        task = available_tasks("speed-bench")[name]
        local = dataclasses.replace(task, hf=task.hf | {"path": str(tmp_path)})
        expected = [r for r in rows if r["category"] == name and not r["turns"][0].startswith(task.placeholder)]
        questions = load_questions(local, "hf", None, limit=3)  # summarization: 2 prompts, 1 placeholder
        assert [(q.question_id, q.category, q.turns) for q in questions] == [
            (r["question_id"], r["category"], r["turns"]) for r in expected[:3]]


def test_offline_without_files_one_line_names_the_dataset(tiny_target_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    base = ["run", "--target", str(tiny_target_dir), "--out", str(tmp_path / "never"), "--methods", "vanilla",
            "--report-dir", str(tmp_path / "rep")]
    err = bad_input(capsys, [*base, "--suite", "speed-bench", "--tasks", "coding"])
    assert "HF dataset nvidia/SPEED-Bench (config qualitative)" in err
    assert "--question-dir DIR with DIR/speed_bench/qualitative.jsonl" in err
    err = bad_input(capsys, [*base, "--suite", "speed-bench-throughput", "--tasks", "throughput_8k"])
    assert "HF dataset nvidia/SPEED-Bench (config throughput_8k)" in err
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed: the import fails
    err = bad_input(capsys, [*base, "--suite", "speed-bench", "--tasks", "coding"])
    assert "nvidia/SPEED-Bench (config qualitative), which needs the datasets package: pip install datasets" in err
    assert not (tmp_path / "never").exists() and not (tmp_path / "rep").exists()


def run_suite(target: Path, root: Path, suite: str, *extra: str) -> Path:
    out = root / suite
    assert main(["run", "--target", str(target), "--out", str(out), "--report-dir", str(out / "report"),
                 "--methods", "vanilla", "--suite", suite, "--question-dir", str(FIXTURES), "--max-new-tokens", "3",
                 "--temperatures", "0", *extra]) == 0
    return out


def test_the_fixture_runs_end_to_end_and_the_report_groups_by_category_and_input_length(tiny_target_dir, tmp_path):
    out = run_suite(tiny_target_dir, tmp_path, "speed-bench", "--limit", "1")
    assert sorted({r.task for r in read_records(out)}) == CATEGORIES
    table = (out / "report" / "speedup_T0.md").read_text(encoding="utf-8")
    names = display_names()
    assert all(f"| {names.get(c, c)} Speedup " in table for c in CATEGORIES)
    out = run_suite(tiny_target_dir, tmp_path, "speed-bench-throughput", "--tasks", "throughput_1k,throughput_2k")
    assert {(r.task, r.task_category) for r in read_records(out)} == {
        (bucket, tier) for bucket in ("throughput_1k", "throughput_2k") for tier in ("low_entropy", "mixed", "high_entropy")}
    table = (out / "report" / "speedup_T0.md").read_text(encoding="utf-8")
    assert "Input 1k Speedup" in table and "Input 2k Speedup" in table
    for bucket in ("throughput_1k", "throughput_2k"):
        tiers = (out / "report" / f"categories_{bucket}_T0.md").read_text(encoding="utf-8")
        assert all(f"{tier} Speedup" in tiers for tier in ("low_entropy", "mixed", "high_entropy"))
