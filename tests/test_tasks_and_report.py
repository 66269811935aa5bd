"""Task sources (embedded, question files, HF field mappings on a local dataset) and the report's arithmetic."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specbench.analysis.tables import speedup_table, table_with_interval, to_latex, to_markdown
from specbench.run.tasks import available_tasks, load_hf_questions, load_questions, questions_from_rows
from tests.conftest import SHARED_DATA

PAPER_TASKS = ["mt_bench", "humaneval", "gsm8k", "alpaca", "cnn_dm", "natural_questions"]


def test_six_tasks_in_paper_order_with_embedded_samples():
    tasks = available_tasks()
    assert list(tasks) == PAPER_TASKS
    for task in tasks.values():
        questions = load_questions(task, "embedded", None, None)
        assert len(questions) >= 5
        assert all(q.turns and all(t.strip() for t in q.turns) for q in questions)
    assert all(len(q.turns) == 2 for q in load_questions(tasks["mt_bench"], "embedded", None, None))


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="../shared/data is absent (a user's clone has none)")
def test_shared_question_files_load():
    for task in available_tasks().values():
        questions = load_questions(task, "files", SHARED_DATA / "tasks", None)
        assert len(questions) == 80, task.name


def synthetic_row(task: str) -> dict:
    return {
        "mt_bench": {"prompt_id": 7, "category": "writing", "prompt": ["first turn", "second turn"]},
        "humaneval": {"task_id": "HumanEval/1", "prompt": "def f():\n"},
        "gsm8k": {"question": "What is 2 + 3?", "answer": "5"},
        "alpaca": {"instruction": "Do a thing", "input": "", "output": "ok"},
        "cnn_dm": {"id": "abc", "article": "Some news.", "highlights": "News."},
        "natural_questions": {"question": "who wrote hamlet", "answer": ["Shakespeare"]},
    }[task]


@pytest.mark.parametrize("name", PAPER_TASKS)
def test_hf_field_mapping_of_every_task(name):
    task = available_tasks()[name]
    [question] = questions_from_rows([synthetic_row(name)], task.hf, name)
    assert question.turns and all(t.strip() for t in question.turns)
    if name == "mt_bench":
        assert question.turns == ["first turn", "second turn"] and question.question_id == 7
    if name == "alpaca":
        assert question.turns == ["Do a thing"]  # an empty input leaves no trailing blank lines
    if name == "humaneval":
        assert question.turns[0].endswith("def f():") and question.question_id == "HumanEval/1"


def test_hf_loading_from_a_local_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [synthetic_row("alpaca"), {"instruction": "Translate", "input": "bonjour", "output": "hello"}]
    datasets.Dataset.from_list(rows).to_json(str(tmp_path / "train.jsonl"))
    questions = load_hf_questions(available_tasks()["alpaca"], limit=None, path=str(tmp_path))
    assert [q.turns for q in questions] == [["Do a thing"], ["Translate\n\nbonjour"]]


def test_speedup_is_token_rate_ratio_and_tau_counts_the_bonus():
    frame = pd.DataFrame([
        # method, task, tokens, seconds, forwards
        ("vanilla", "gsm8k", 100, 10.0, 100), ("vanilla", "gsm8k", 100, 10.0, 100),
        ("pld", "gsm8k", 100, 5.0, 40), ("pld", "gsm8k", 100, 5.0, 40),
        ("vanilla", "alpaca", 50, 5.0, 50), ("pld", "alpaca", 50, 10.0, 50),
    ], columns=["method", "task", "new_tokens", "wall_time", "steps"])
    frame["lossless"] = True
    table = speedup_table(frame)
    assert table.loc["vanilla", ("gsm8k", "Speedup")] == 1.0
    assert table.loc["pld", ("gsm8k", "Speedup")] == pytest.approx(2.0)
    assert table.loc["pld", ("gsm8k", "τ")] == pytest.approx(2.5)
    assert table.loc["pld", ("alpaca", "Speedup")] == pytest.approx(0.5)
    assert table.loc["pld", ("Mean", "Speedup")] == pytest.approx(1.25)
    assert list(table.columns.get_level_values(0))[:2] == ["gsm8k", "gsm8k"]


def test_specbench_speedup_is_a_ratio_of_per_question_means_and_best_is_bold():
    frame = pd.DataFrame([
        ("vanilla", "gsm8k", 10, 1.0, 10), ("vanilla", "gsm8k", 100, 20.0, 100),  # 10 and 5 tok/s: mean 7.5
        ("eagle", "gsm8k", 10, 0.5, 4), ("eagle", "gsm8k", 100, 20.0, 40),  # 20 and 5 tok/s: mean 12.5
    ], columns=["method", "task", "new_tokens", "wall_time", "steps"])
    frame["lossless"] = True
    headline = speedup_table(frame)
    spec_bench = speedup_table(frame, per_question_means=True)
    assert headline.loc["eagle", ("gsm8k", "Speedup")] == pytest.approx((110 / 20.5) / (110 / 21.0))
    assert spec_bench.loc["eagle", ("gsm8k", "Speedup")] == pytest.approx(12.5 / 7.5)
    text = to_markdown(headline)
    assert "**1.02×**" in text and "**2.50**" in text  # best speedup and best τ in bold
    assert "\\textbf{2.50}" in to_latex(headline, "caption")


def test_repeats_give_mean_and_a_student_t_interval():
    rows = []
    for repeat, pld_seconds in enumerate([4.0, 5.0, 6.0]):  # pld speedups 2.5, 2.0, 1.667 over vanilla
        rows += [("vanilla", "gsm8k", 100, 10.0, 100, repeat), ("pld", "gsm8k", 100, pld_seconds, 50, repeat)]
    frame = pd.DataFrame(rows, columns=["method", "task", "new_tokens", "wall_time", "steps", "repeat"])
    frame["lossless"] = True
    table, half = table_with_interval(frame)
    speedups = np.array([2.5, 2.0, 10 / 6])
    assert table.loc["pld", ("gsm8k", "Speedup")] == pytest.approx(speedups.mean())
    assert half.loc["pld", ("gsm8k", "Speedup")] == pytest.approx(4.302653 * speedups.std(ddof=1) / 3 ** 0.5, rel=1e-5)
    assert half.loc["pld", ("gsm8k", "τ")] == pytest.approx(0.0)
    assert " ± " in to_markdown(table, half) and r"$\pm$" in to_latex(table, "c", half)
    assert table_with_interval(frame[frame["repeat"] == 0])[1] is None
