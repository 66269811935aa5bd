"""Task sources (embedded, question files, HF field mappings on a local dataset) and the report's arithmetic."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specbench.analysis.latex import to_latex
from specbench.analysis.tables import format_table, speedup_table, table_with_interval, to_markdown
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
    frame["question_id"] = ["1", "2", "1", "2", "1", "1"]
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
        ("pld", "gsm8k", 10, 1.0, 10), ("pld", "gsm8k", 100, 21.0, 100),
    ], columns=["method", "task", "new_tokens", "wall_time", "steps"])
    frame["lossless"] = True
    frame["question_id"] = ["1", "2"] * 3
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
    frame["question_id"] = "1"
    table, half = table_with_interval(frame)
    speedups = np.array([2.5, 2.0, 10 / 6])
    assert table.loc["pld", ("gsm8k", "Speedup")] == pytest.approx(speedups.mean())
    # log scale: [mean·e^-h, mean·e^h], h = t × sd(log speedup) / √3; its lower end above zero
    h = 4.302653 * np.log(speedups).std(ddof=1) / 3 ** 0.5
    assert half.loc["pld", ("gsm8k", "Speedup")] == pytest.approx(h, rel=1e-5)
    assert half.loc["pld", ("gsm8k", "τ")] == pytest.approx(0.0)
    low, high = speedups.mean() * np.exp(-h), speedups.mean() * np.exp(h)
    assert f"2.06× [{low:.2f}, {high:.2f}]" in to_markdown(table, half) and 0 < low < speedups.min()
    assert rf"2.06$\times$$^{{+{high - 2.06:.2f}}}_{{-{2.06 - low:.2f}}}$" in to_latex(table, "c", half)
    assert table_with_interval(frame[frame["repeat"] == 0])[1] is None  # one question: no interval over questions


def paired_frame(seed: int = 0, questions: int = 30, lossy: str = "") -> pd.DataFrame:
    """Per-question records of vanilla and two methods on three tasks: vanilla's times vary by question, each
    method's follow them with noise (so the pairing matters); `lossy`: that method is lossy."""
    rng = np.random.default_rng(seed)
    rows = []
    for task in ["mt_bench", "cnn_dm", "natural_questions"]:
        for q in range(questions):
            tokens = int(rng.integers(40, 200))
            base = tokens * 0.03 * rng.uniform(0.8, 1.2)
            rows.append(("vanilla", task, str(q), tokens, base, tokens))
            rows.append(("pld", task, str(q), tokens, base / rng.uniform(1.1, 1.9), tokens / rng.uniform(1.3, 2.2)))
            rows.append(("eagle@head=heads/x/y/z", task, str(q), tokens, base * rng.uniform(1.0, 1.3), tokens / 1.2))
    frame = pd.DataFrame(rows, columns=["method", "task", "question_id", "new_tokens", "wall_time", "steps"])
    return frame.assign(lossless=frame["method"] != lossy, repeat=0, category="", temperature=0.0, turns=1)


def test_interval_over_questions_matches_a_jackknife():
    frame = paired_frame()
    table, half = table_with_interval(frame)
    assert np.isnan(half.loc["vanilla"]).all()  # vanilla's ratios are 1 by definition
    part = frame[frame["task"] == "mt_bench"]
    questions = sorted(set(part["question_id"]))

    def speedup(keep: list[str]) -> float:
        rows = part[part["question_id"].isin(keep)]
        sums = rows.groupby("method")[["new_tokens", "wall_time"]].sum()
        rate = sums["new_tokens"] / sums["wall_time"]
        return rate["pld"] / rate["vanilla"]

    leave_one_out = np.array([speedup([q for q in questions if q != left]) for q in questions for left in [q]])
    n = len(questions)
    jackknife_se = np.sqrt((n - 1) / n * np.sum((leave_one_out - leave_one_out.mean()) ** 2))
    assert table.loc["pld", ("mt_bench", "Speedup")] == pytest.approx(speedup(questions))
    # log half-width × the cell ≈ the half-width on the cell's own scale
    assert half.loc["pld", ("mt_bench", "Speedup")] * speedup(questions) == pytest.approx(2.045 * jackknife_se, rel=0.15)
    # the mean over three tasks is tighter than any one task
    assert half.loc["pld", ("Mean", "Speedup")] < half.loc["pld", [(t, "Speedup") for t in ["mt_bench", "cnn_dm"]]].min()


def test_latex_is_a_booktabs_float_with_display_names_and_no_bold_vanilla():
    frame = paired_frame(questions=5)
    slower = (frame["method"] == "pld") & (frame["task"] == "cnn_dm")
    frame.loc[slower, "wall_time"] *= 3  # on CNN/DM vanilla is faster than both methods
    table, half = table_with_interval(frame)
    latex = to_latex(table, "Speedup and τ", half, label="tab:x")
    assert latex.startswith("% Needs \\usepackage{booktabs}")
    assert "\\begin{table*}" in latex and "\\toprule" in latex and "\\cmidrule(lr){2-3}" in latex
    assert "\\multicolumn{2}{c}{MT-bench}" in latex and "CNN/DM" in latex and "Natural\\\\Questions" in latex
    assert "mt\\_bench" not in latex and "natural" not in latex
    rows = {line.split(" & ")[0]: line for line in latex.splitlines() if " & " in line}
    assert "eagle" in rows and "\\textbf" not in rows["vanilla"]  # vanilla is the reference, never bold
    assert table.loc["vanilla", ("cnn_dm", "Speedup")] > table.loc["pld", ("cnn_dm", "Speedup")]
    assert rows["pld"].count("$^{+") == 2  # intervals on the mean (every cell's: the CSV)
    assert "\\label{tab:x}" in latex and "\\caption{Speedup and $\\tau$}" in latex
    assert "Speedup" in to_markdown(table, half) and "MT-bench Speedup" in to_markdown(table, half)


def test_csv_has_one_header_row_and_captions_mention_lossy_only_when_present(tmp_path):
    from specbench.analysis.notes import caption_notes
    from specbench.analysis.report import write_table
    from specbench.analysis.tables import question_counts

    frame = paired_frame(questions=4)
    table, half = table_with_interval(frame)
    write_table(table, tmp_path, "speedup_T0", "Speedup", ["command: x"], half, question_counts(frame),
                caption_notes(frame))
    lines = (tmp_path / "speedup_T0.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "# command: x"
    assert lines[1].startswith("method,mt_bench_speedup,mt_bench_speedup_ci95_low,mt_bench_speedup_ci95_high,")
    assert lines[2].startswith("vanilla,1.0,")
    csv = pd.read_csv(tmp_path / "speedup_T0.csv", comment="#", index_col="method")
    assert list(csv["mt_bench_questions"]) == [4, 4, 4] and "mean_tau_ci95_high" in csv.columns
    assert all(len(str(v).split(".")[-1]) <= 3 for v in csv["pld" == csv.index].iloc[0] if isinstance(v, float))
    assert "(lossy)" not in (tmp_path / "speedup_T0.md").read_text(encoding="utf-8")
    assert "4 questions per task" in (tmp_path / "speedup_T0.tex").read_text(encoding="utf-8")
    assert "(lossy)" in caption_notes(paired_frame(lossy="pld"))


def test_speedup_figure_has_error_bars_no_vanilla_bars_and_fixed_colours():
    pytest.importorskip("matplotlib")
    from specbench.analysis.plots import method_colours, speedup_figure

    frame = paired_frame(questions=5)
    colours = method_colours(list(frame["method"]))
    assert len(set(colours.values())) == len(colours)
    figure = speedup_figure(frame, colours, "0")
    for ax in figure.axes[:2]:
        bars = [c for c in ax.containers if hasattr(c, "errorbar")]
        assert [c.get_label() for c in bars] == ["eagle", "pld"]  # no vanilla bar; legend names without the path
        assert all(c.errorbar is not None for c in bars)
        for container, method in zip(bars, ["eagle@head=heads/x/y/z", "pld"]):
            assert container.patches[0].get_facecolor()[:3] == pytest.approx(colours[method][:3])
    assert [t.get_text() for t in figure.axes[1].get_xticklabels()] == [
        "MT-bench\nn=5", "CNN/DM\nn=5", "Natural Questions\nn=5", "Mean\nn=15"]


def cut_frame() -> pd.DataFrame:
    """A run cut after some questions: vanilla finished ten gsm8k questions, pld the first eight; pld is twice as
    fast as vanilla on those eight, and vanilla's last two are fast ones (over all ten vanilla looks faster)."""
    rows = [("vanilla", str(q), 100, 10.0 if q < 8 else 1.0, 100) for q in range(10)]
    rows += [("pld", str(q), 100, 5.0, 40) for q in range(8)]
    frame = pd.DataFrame(rows, columns=["method", "question_id", "new_tokens", "wall_time", "steps"])
    return frame.assign(task="gsm8k", lossless=True, repeat=0, turns=1, category="", temperature=0.0)


def test_a_cut_run_gives_speedups_over_the_shared_questions_only(tmp_path):
    from specbench.analysis.notes import fewer_questions
    from specbench.analysis.report import temperature_tables, write_table
    from specbench.analysis.tables import question_counts, uneven_counts

    frame = cut_frame()
    for per_question_means in (False, True):
        table = speedup_table(frame, per_question_means)
        assert table.loc["pld", ("gsm8k", "Speedup")] == pytest.approx(2.0)  # not (800/40) / (1000/82)
    table, half = table_with_interval(frame)
    pairs = uneven_counts(frame)
    assert pairs.loc["pld", ("gsm8k", "Speedup")] == 8 and np.isnan(pairs.loc["vanilla", ("gsm8k", "Speedup")])
    assert uneven_counts(frame[frame["question_id"].astype(int) < 8]) is None  # the same sets: no n in the cells
    assert fewer_questions(frame) == "pld 8 of 10"
    printed = temperature_tables(frame, "0", "target", tmp_path, ["command: x"])
    warnings = [line for line in printed if line.startswith("warning:")]
    assert len(warnings) == 1 and "\n" not in warnings[0] and "(pld 8 of 10)" in warnings[0]
    write_table(table, tmp_path, "speedup_T0", "Speedup", ["command: x"], half, question_counts(frame), "", "", pairs)
    markdown = (tmp_path / "speedup_T0.md").read_text(encoding="utf-8")
    assert "2.00× [2.00, 2.00] (n=8)" in markdown and "questions per task: GSM8K 8–10" in markdown
    csv = pd.read_csv(tmp_path / "speedup_T0.csv", comment="#", index_col="method")
    assert csv.loc["pld", "gsm8k_speedup_n"] == 8 and csv.loc["pld", "gsm8k_speedup"] == 2.0


def test_throughput_speedup_pairs_the_batches_both_decoded():
    from specbench.analysis.throughput import throughput_counts, throughput_table

    frame = cut_frame().assign(batch_size=2, device="cpu", accept_lengths=None, turn_steps=None,
                               turn_verify_time=None, draft_time=0.0, verify_time=0.0)
    frame = frame.assign(batch_index=frame["question_id"].astype(int) // 2, batch_wall_time=frame["wall_time"],
                         turn_steps=[(s,) for s in frame["steps"]], turn_verify_time=[(0.0,)] * len(frame))
    table = throughput_table(frame)
    assert table.loc["pld", ("B=2", "Speedup")] == pytest.approx(2.0)  # batches 0-3, not vanilla's fast batch 4
    assert table.loc["vanilla", ("B=2", "tok/s")] == pytest.approx(1000 / 41)  # its own batches, all five
    counts = throughput_counts(frame)  # pld's cells state the 8 questions behind them
    assert counts.loc["pld", ("B=2", "tok/s")] == 8 and counts.loc["pld", ("B=2", "Speedup")] == 8
    assert counts.loc["vanilla"].isna().all()
    assert "2.00× (n=8)" in to_markdown(table, counts=counts)


def two_question_frame() -> pd.DataFrame:
    """Two questions a task whose speedups and τ differ wildly: a symmetric interval would reach below zero (and τ
    below one)."""
    rows = []
    for task in ("mt_bench", "gsm8k"):
        rows += [("vanilla", task, "1", 100, 10.0, 100), ("vanilla", task, "2", 100, 10.0, 100),
                 ("pld", task, "1", 100, 1.0, 20), ("pld", task, "2", 100, 30.0, 99)]
    frame = pd.DataFrame(rows, columns=["method", "task", "question_id", "new_tokens", "wall_time", "steps"])
    return frame.assign(lossless=True, repeat=0, turns=1, category="", temperature=0.0)


def test_a_two_question_table_and_plot_keep_their_intervals_inside_the_bounds_and_state_n(tmp_path):
    pytest.importorskip("matplotlib")
    from specbench.analysis.notes import caption_notes
    from specbench.analysis.plots import method_colours, speedup_figure
    from specbench.analysis.report import write_table
    from specbench.analysis.tables import intervals, question_counts

    frame = two_question_frame()
    table, half = table_with_interval(frame)
    bounds = intervals(table, half)
    for (task, stat), frame_bounds in bounds.items():
        low = frame_bounds.loc["pld", "low"]
        assert low > (1.0 if stat == "τ" else 0.0) or (stat == "τ" and low == 1.0), (task, stat, low)
        assert low <= table.loc["pld", (task, stat)] <= frame_bounds.loc["pld", "high"]
    write_table(table, tmp_path, "speedup_T0", "Speedup", ["command: x"], half, question_counts(frame),
                caption_notes(frame))
    markdown = (tmp_path / "speedup_T0.md").read_text(encoding="utf-8")
    assert "2 questions per task" in markdown
    cells = [c.strip() for line in markdown.splitlines() if line.startswith("| pld") for c in line.split("|")[2:-1]]
    for cell in cells:  # "1.23× [0.45, 3.38]": every low end above the quantity's bound
        value, low, high = re.fullmatch(r"\**([\d.]+)×? \[([\d.e-]+), ([\d.e+-]+)\]\**", cell).groups()
        assert 0 < float(low) <= float(value) <= float(high)
    assert all(float(re.search(r"\[([\d.e-]+),", c).group(1)) >= 1.0 for c in cells[1::2])  # τ ≥ 1
    figure = speedup_figure(frame, method_colours(list(frame["method"])), "0")
    for ax in figure.axes[:2]:
        for container in (c for c in ax.containers if hasattr(c, "errorbar")):
            segments = container.errorbar.lines[2][0].get_segments()
            assert all(segment[0][1] > 0 for segment in segments)  # lower ends above zero
    assert [t.get_text() for t in figure.axes[1].get_xticklabels()] == ["MT-bench\nn=2", "GSM8K\nn=2", "Mean\nn=4"]
    assert "n: questions" in figure.axes[0].get_title()


def test_bold_only_beats_the_baseline():
    frame = cut_frame()
    frame = pd.concat([frame[frame["method"] == "vanilla"],
                       frame[frame["method"] == "pld"].assign(wall_time=20.0),
                       frame[frame["method"] == "pld"].assign(method="sps", wall_time=15.0, steps=100)])
    text = format_table(speedup_table(frame))  # pld 0.50×, sps 0.67×: the fastest method is slower than vanilla
    assert not any("**" in cell for cell in text[("gsm8k", "Speedup")])
    assert text.loc["pld", ("gsm8k", "τ")] == "**2.50**"  # pld's τ beats vanilla's 1.00


def test_budget_is_complete_for_the_shipped_drafters_with_repository_paths():
    from specbench.analysis.budget import repository_path, training_budget

    root = Path(__file__).resolve().parents[1]
    defaults = sorted(root.glob("heads/*/*/DEFAULT"))
    if not defaults:
        pytest.skip("no heads/ folder here (an installed package without the checkout's drafters)")
    for default in defaults:
        folder = (default.parent / default.read_text(encoding="utf-8").strip()).resolve()
        elsewhere = f"/another/checkout/{folder.relative_to(root).as_posix()}"  # as another checkout's run.json names it
        assert repository_path(elsewhere, root) == folder.relative_to(root).as_posix()
        assert repository_path("/own/heads/my/head", root) == "/own/heads/my/head"  # not in this checkout: as it is
        cells = training_budget(str(folder))
        text = " ".join(cells.values())
        assert "unknown" not in text and "not recorded" not in text and "/work" not in text, (folder, cells)


def test_captions_say_where_methods_emitted_other_token_counts_than_vanilla():
    from specbench.analysis.notes import caption_notes

    frame = two_question_frame()
    assert "differ from vanilla's" not in caption_notes(frame)
    stopped = (frame["method"] == "pld") & (frame["task"] == "gsm8k") & (frame["question_id"] == "1")
    frame.loc[stopped, "new_tokens"] = 10  # pld stopped early on one question (a synthetic run's output, say)
    assert "(pld 310 vs 400)" in caption_notes(frame)
    assert "differ from vanilla's" not in caption_notes(frame.assign(temperature=1.0))  # sampled: its own text
