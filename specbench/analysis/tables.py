"""The report's tables as pandas frames: per-question records, speedup and τ per method and task (with 95%
intervals over repeats), and their Markdown and LaTeX forms (specbench.analysis.report says how each number is
computed; throughput at batch sizes: specbench.analysis.throughput)."""
from __future__ import annotations

import re

import pandas as pd

from specbench.analysis.intervals import delta_half_widths, interval_bounds, log_half_widths
from specbench.analysis.pairs import paired_speedups
from specbench.run.record import Record
from specbench.run.registry import COMPILED, REFERENCES
from specbench.run.tasks import DEFAULT_SUITE, suites


def per_question_frame(records: list[Record]) -> pd.DataFrame:
    rows = []
    for r in records:
        choice = r.choice
        rows.append({
            "method": r.method, "lossless": r.lossless, "task": r.task, "category": r.task_category,
            "device": r.worker.device if r.worker else "",  # records before workers were named: one kind
            "repeat": r.repeat, "batch_size": r.batch_size, "batch_index": r.batch.index if r.batch else -1,
            # the wall time of the batches this question took part in (its own, alone); max over a batch's records
            # is the batch's, since a question with fewer turns sat out the later batches
            "batch_wall_time": sum(choice.batch_wall_time if choice.batch_wall_time is not None else choice.wall_time),
            "temperature": r.temperature, "question_id": str(r.question_id), "turns": len(choice.new_tokens),
            "new_tokens": sum(choice.new_tokens), "wall_time": sum(choice.wall_time),
            "steps": sum(choice.decoding_steps), "draft_time": sum(choice.draft_time),
            "verify_time": sum(choice.verify_time),
            "accept_lengths": [a for turn in choice.accept_lengths for a in turn],
            # per turn, for a batch's own counts: its forwards and forward time are those of its longest row
            "turn_steps": tuple(choice.decoding_steps), "turn_verify_time": tuple(choice.verify_time),
        })
    return pd.DataFrame(rows)


def display_names() -> dict[str, str]:
    """Each built-in task's name in tables and plots (the default suite's first where two suites share a name)."""
    names: dict[str, str] = {}
    known = suites()
    for suite in sorted(known, key=lambda s: s != DEFAULT_SUITE):
        for task in known[suite]:
            names.setdefault(task.name, task.display_name or task.name)
    return names


def method_label(method: str, lossless: bool) -> str:
    return method if lossless else f"{method} (lossy)"


def method_order(method: str) -> tuple[bool, bool, str, str]:
    """Sort key of the rows of a table and the bars of a plot: vanilla first, then the reference rows (hf-compiled,
    hf-eager), then by name (eagle before eagle3@..., a method's variants together)."""
    return method != "vanilla", method not in REFERENCES, method.partition("@")[0], method


def labelled_rows(table: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """Rows = methods in method_order, each labelled (lossy) where it is."""
    order = sorted(table.index, key=method_order)
    lossless = frame.groupby("method")["lossless"].first()
    table = table.loc[order]
    table.index = [method_label(m, bool(lossless[m])) for m in order]
    table.index.name = "method"
    return table


def speedup_table(frame: pd.DataFrame, per_question_means: bool = False, baseline: str = "vanilla") -> pd.DataFrame:
    """Rows = methods (labelled), columns = (task, Speedup | τ) then (Mean, ...), for one temperature; speedups over
    `baseline`'s row (vanilla, or a reference row such as hf-compiled)."""
    return labelled_rows(raw_speedup_table(frame, per_question_means, baseline), frame)


def raw_speedup_table(frame: pd.DataFrame, per_question_means: bool = False, baseline: str = "vanilla") -> pd.DataFrame:
    """speedup_table with the method names as they are."""
    sums = frame.groupby(["method", "task"])[["new_tokens", "steps"]].sum()
    tau = sums["new_tokens"] / sums["steps"]
    speedup = paired_speedups(frame, per_question_means, baseline)[0].reindex(tau.index)
    table = pd.concat({"Speedup": speedup.unstack("task"), "τ": tau.unstack("task")}, axis=1)
    table = table.swaplevel(0, 1, axis=1)
    tasks = list(dict.fromkeys(frame["task"]))
    for stat in ("Speedup", "τ"):
        table[("Mean", stat)] = table[[(t, stat) for t in tasks]].mean(axis=1)
    return table[[(t, s) for t in [*tasks, "Mean"] for s in ("Speedup", "τ")]]


def uneven_counts(frame: pd.DataFrame, baseline: str = "vanilla") -> pd.DataFrame | None:
    """Rows = methods (labelled), columns = (task, "Speedup") and ("Mean", "Speedup"): how many questions each
    speedup is over, where that is fewer than the method or the baseline finished (NaN elsewhere); None when every
    speedup is over every question both rows have."""
    own = frame.groupby(["method", "task"]).size()
    paired = paired_speedups(frame, baseline=baseline)[1].reindex(own.index).fillna(0).astype(int)
    base = own.xs(baseline, level="method") if baseline in own.index.get_level_values("method") else None
    if base is None:
        return None
    full = (paired == own) & (paired == base.reindex(own.index.get_level_values("task")).fillna(-1).to_numpy())
    if full.all():
        return None
    counts = paired.unstack("task")
    tasks = list(dict.fromkeys(frame["task"]))
    table = pd.DataFrame({(t, "Speedup"): counts[t] for t in tasks} | {("Mean", "Speedup"): counts[tasks].sum(axis=1)})
    shown = full.unstack("task")[tasks].fillna(True).astype(bool)
    table = table.astype(float).where(~pd.concat([shown, shown.all(axis=1)], axis=1).to_numpy())
    return labelled_rows(table, frame)


def with_reference_column(board: pd.DataFrame, half: pd.DataFrame | None, versus: pd.DataFrame,
                          versus_half: pd.DataFrame | None) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """A leaderboard with each row's speedup over hf-compiled beside its speedup over vanilla (`versus`: the same
    rows' table with hf-compiled as the baseline), and that column's intervals."""
    group = board.columns[0][0]
    column = (group, f"Speedup vs {COMPILED}")
    board = board.copy()
    board[column] = versus.loc[board.index, (group, "Speedup")]
    if half is None and versus_half is None:
        return board, None
    half = half.copy() if half is not None else pd.DataFrame(float("nan"), index=board.index, columns=board.columns[:-1])
    half[column] = versus_half.loc[board.index, (group, "Speedup")] if versus_half is not None else float("nan")
    return board, half


def leaderboard(table: pd.DataFrame, half: pd.DataFrame | None) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """One row per method over every task at once (a table made with task = "Overall"), fastest first."""
    keep = [("Overall", "Speedup"), ("Overall", "τ")]
    order = table[keep[0]].sort_values(ascending=False, kind="stable").index
    return table.loc[order, keep], (half.loc[order, keep] if half is not None else None)


LONGEST_STEP = "longest step"  # a half-width frame's attrs key: per row, the most tokens one of its steps emitted


def longest_steps(frame: pd.DataFrame) -> dict[str, int]:
    """Per method (labelled as the tables' rows): the most tokens one decoding step emitted in these records, which
    bounds its τ; {} where the frame holds no accept lengths."""
    if "accept_lengths" not in frame:
        return {}
    lossless = frame.groupby("method")["lossless"].first()
    found = {}
    for method, lengths in frame.groupby("method", sort=False)["accept_lengths"]:
        steps = [a for turn in lengths if isinstance(turn, list) for a in turn]
        if steps:
            found[method_label(method, bool(lossless[method]))] = max(steps)
    return found


def table_with_interval(frame: pd.DataFrame, per_question_means: bool = False,
                        baseline: str = "vanilla") -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The table (mean over repeats) and the log half-widths of the 95% intervals: over repeats, or with a single
    repeat over the questions paired with the baseline's (specbench.analysis.intervals); None where there are none."""
    repeats = sorted(frame["repeat"].unique()) if "repeat" in frame else [0]
    if len(repeats) < 2:
        raw = raw_speedup_table(frame, per_question_means, baseline)
        half = delta_half_widths(frame.assign(repeat=repeats[0]), raw, per_question_means, baseline)
        if half.isna().all().all():
            return labelled_rows(raw, frame), None
        half = labelled_rows(half, frame)
        half.attrs[LONGEST_STEP] = longest_steps(frame)  # τ's intervals end there (intervals)
        return labelled_rows(raw, frame), half
    tables = [speedup_table(frame[frame["repeat"] == r], per_question_means, baseline) for r in repeats]
    mean = pd.concat(tables, keys=range(len(tables))).groupby(level=1, sort=False).mean()
    order = tables[0].index
    half = log_half_widths(tables).loc[order]
    mean = mean.loc[order]
    mean.index.name = half.index.name = "method"
    half.attrs[LONGEST_STEP] = longest_steps(frame)
    return mean, half


def bold_threshold(table: pd.DataFrame, column: tuple[str, str]) -> float | None:
    """What a method must beat to be bold in a column: the baseline's 1.00× in a speedup column, vanilla's value in
    any other (τ, tok/s); None (nothing bold) without a vanilla row."""
    if column[1].startswith("Speedup"):
        return 1.0
    return float(table.loc["vanilla", column]) if "vanilla" in table.index else None


def intervals(table: pd.DataFrame, half_width: pd.DataFrame) -> dict[tuple[str, str], pd.DataFrame]:
    """Each column's 95% interval as a frame (low, high) per row, from the log half-widths (NaN where none); a τ
    interval ends at the row's longest step where the half-widths carry it (table_with_interval)."""
    out = {}
    longest = half_width.attrs.get(LONGEST_STEP, {})
    for column in table.columns:
        upper = longest if column[1] == "τ" else {}
        bounds = [interval_bounds(v, h, column[1], upper.get(row)) if not (pd.isna(v) or pd.isna(h))
                  else (float("nan"),) * 2 for row, v, h in zip(table.index, table[column], half_width[column])]
        out[column] = pd.DataFrame(bounds, index=table.index, columns=["low", "high"])
    return out


def bound(value: float) -> str:
    """An interval's end: two decimals, or two significant digits below 0.01 (a wide interval's low end stays
    visibly above zero)."""
    return f"{value:.2f}" if value >= 0.01 else f"{value:.2g}"


def format_table(table: pd.DataFrame, bold: tuple[str, str] = ("**", "**"),
                 half_width: pd.DataFrame | None = None, interval_columns: set | None = None,
                 counts: pd.DataFrame | None = None) -> pd.DataFrame:
    """Two decimals, × on speedups, the 95% interval [low, high] when there is one (in `interval_columns` only, when
    given), "(n=N)" where `counts` has a number (a speedup over fewer questions than the rows finished,
    uneven_counts), the best of each column among the methods in bold where it beats the baseline (vanilla's row
    and the reference rows do not compete)."""
    text = table.copy().astype(object)
    bounds = intervals(table, half_width) if half_width is not None else {}
    for column in table.columns:
        suffix = "×" if column[1].startswith("Speedup") else ""
        digits = 1 if column[1] in ("tok/s", "forward ms", "draft ms") else 2
        rivals = table.loc[[m for m in table.index if m != "vanilla" and m not in REFERENCES], column].dropna()
        threshold = bold_threshold(table, column)
        best = None if column[1].endswith(" ms") or len(rivals) < 2 or threshold is None else rivals.max()
        show = column in bounds and (interval_columns is None or column in interval_columns)
        cells = []
        for method, v in table[column].items():
            if pd.isna(v):
                cells.append("—")
                continue
            cell = f"{v:.{digits}f}{suffix}"
            if show and not pd.isna(bounds[column].loc[method, "low"]):
                cell += f" [{bound(bounds[column].loc[method, 'low'])}, {bound(bounds[column].loc[method, 'high'])}]"
            if counts is not None and column in counts.columns and not pd.isna(counts.loc[method, column]):
                cell += f" (n={int(counts.loc[method, column])})"
            beats = best is not None and v == best and method in rivals.index and v > threshold
            cells.append(f"{bold[0]}{cell}{bold[1]}" if beats else cell)
        text[column] = cells
    return text


def to_markdown(table: pd.DataFrame, half_width: pd.DataFrame | None = None,
                counts: pd.DataFrame | None = None) -> str:
    text = format_table(table, half_width=half_width, counts=counts)
    names = display_names()
    text.columns = [f"{names.get(task, task)} {stat}" for task, stat in text.columns]
    return text.to_markdown(disable_numparse=True)


def question_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows = methods (labelled), columns = tasks: how many questions each method answered."""
    counts = frame.groupby(["method", "task"], sort=False)["question_id"].nunique().unstack("task")
    return labelled_rows(counts[list(dict.fromkeys(frame["task"]))].fillna(0).astype(int), frame)


def questions_note(counts: pd.DataFrame, unit: str = "task") -> str:
    """"10 questions per task", or each task's count (a range where the methods answered different numbers); `unit`:
    what a column is (task, or category)."""
    low, high = counts.min(), counts.max()
    if low.nunique() == 1 and (low == high).all():
        n = low.iloc[0]
        return f"{n} question{'s' if n != 1 else ''}" + (f" per {unit}" if len(counts.columns) > 1 else "")
    names = display_names()
    return f"questions per {unit}: " + ", ".join(
        f"{names.get(task, task)} {low[task]}" + (f"–{high[task]}" if high[task] != low[task] else "")
        for task in counts.columns)


def _slug(text: str) -> str:
    text = text.replace("τ", "tau").replace("/", "_per_").replace("±95%", "ci95").lower()
    return re.sub(r"[^a-z0-9]+", "_", text).strip("_")


def flat_frame(table: pd.DataFrame, half_width: pd.DataFrame | None = None,
               counts: pd.DataFrame | None = None, digits: int = 3, pairs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The table for a CSV: one header row (mt_bench_speedup, mt_bench_speedup_ci95_low, mt_bench_speedup_ci95_high,
    ..., mt_bench_questions), values rounded; ci95_low and ci95_high bound the 95% interval; with `pairs`
    (uneven_counts), mt_bench_speedup_n: the questions a speedup is over, where fewer than the rows finished."""
    columns: dict[str, pd.Series] = {}
    bounds = intervals(table, half_width) if half_width is not None else {}
    for task, stat in table.columns:
        columns[_slug(f"{task} {stat}")] = table[(task, stat)].round(digits)
        for end in ("low", "high") if bounds else ():
            columns[_slug(f"{task} {stat} ±95% {end}")] = bounds[(task, stat)][end].round(digits)
        if pairs is not None and (task, stat) in pairs.columns:
            columns[_slug(f"{task} {stat} n")] = pairs[(task, stat)].astype("Int64")
        if counts is not None and task in counts.columns and stat == table.columns[-1][1]:
            columns[_slug(f"{task} questions")] = counts[task]
    flat = pd.DataFrame(columns, index=table.index)
    flat.index.name = "method"
    return flat


def short_label(label: str) -> str:
    """A method's name for a legend: option values that are paths keep their last two parts (a head's full path
    crowds a plot out; the tables keep the exact names)."""
    base, at, opts = label.partition("@")
    if not at:
        return label
    parts = []
    for opt in opts.split(":"):
        key, eq, value = opt.partition("=")
        pieces = value.split(" ")  # "PATH (lossy)": the suffix stays
        path = pieces[0].rstrip("/").split("/")
        if eq and len(path) > 2:
            pieces[0] = "…/" + "/".join(path[-2:])
        parts.append(key + eq + " ".join(pieces))
    return f"{base}@{':'.join(parts)}"


def short_labels(labels: list[str], base_only: bool = False) -> dict[str, str]:
    """Each label shortened (base_only: to the method's name, "eagle (lossy)"), unless two would then read the same
    (heads named alike in different folders, or two settings of one method): then the next longer form."""
    forms = [lambda label: label, short_label]
    if base_only:
        forms.append(lambda label: label.partition("@")[0] + (" (lossy)" if label.endswith(" (lossy)") else ""))
    for form in reversed(forms):
        short = {label: form(label) for label in labels}
        if len(set(short.values())) == len(short):
            return short
    return {label: label for label in labels}
