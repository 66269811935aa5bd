"""`specbench report`: speedup over vanilla and mean accepted length τ per method and task, one table per
temperature in the EAGLE paper's layout (rows = methods; per task a Speedup and a τ column; then the mean; best
per column in bold), as Markdown, LaTeX (booktabs) and CSV, plus plots.

Speedup (our headline) = (total new tokens / total wall time) of a method ÷ the same for vanilla, per task.
Speedup, Spec-Bench style (speedup_specbench_*) = mean over questions of the method's tokens/s ÷ the same mean for
vanilla: a ratio of per-question means, which weighs short answers more.
τ = total new tokens / total target forwards (bonus token included, so vanilla's τ is 1.00).
The mean column averages the per-task values. Every file starts with the run's provenance.
Runs with --batch-size B > 1 (or several sizes): the tables above are made per batch size (suffix _B<b>), and
throughput tables compare tokens/s = total new tokens / total batch wall time of each method with vanilla's at the
same B (throughput_T<t>: every B side by side over all tasks; throughput_T<t>_B<b>: per task), plus a plot of
throughput speedup against B.
With --repeats N (N ≥ 2) every cell is the mean over the N repeats ± the half-width of its 95% Student-t interval
(each repeat's table computed on its own, so the interval shows run-to-run variation on this machine).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
from scipy.stats import t as student_t

from specbench.errors import SpecbenchError
from specbench.load import describe as describe_load
from specbench.lock import folder_lock
from specbench.records import read_records, read_run_info


def per_question_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for r in records:
        choice = r["choices"][0]
        rows.append({
            "method": r["method"], "lossless": r.get("lossless", True), "task": r["task"],
            "category": r.get("category") or r["task"],
            "device": (r.get("worker") or {}).get("device", ""),  # records before workers were named: one kind
            "repeat": int(r.get("repeat", 0)),
            "batch_size": int(r.get("batch_size", 1)), "batch_index": (r.get("batch") or {}).get("index", -1),
            # the wall time of the batches this question took part in (its own, alone); max over a batch's records
            # is the batch's, since a question with fewer turns sat out the later batches
            "batch_wall_time": sum(choice.get("batch_wall_time", choice["wall_time"])),
            "temperature": float(r["temperature"]), "question_id": str(r["question_id"]),
            "new_tokens": sum(choice["new_tokens"]), "wall_time": sum(choice["wall_time"]),
            "steps": sum(choice["decoding_steps"]),
            "draft_time": sum(choice.get("draft_time", [0.0])), "verify_time": sum(choice.get("verify_time", [0.0])),
            "accept_lengths": [a for turn in choice["accept_lengths"] for a in turn],
            # per turn, for a batch's own counts: its forwards and forward time are those of its longest row
            "turn_steps": tuple(choice["decoding_steps"]), "turn_verify_time": tuple(choice.get("verify_time", [])),
        })
    return pd.DataFrame(rows)


def method_label(method: str, lossless: bool) -> str:
    return method if lossless else f"{method} (lossy)"


def labelled_rows(table: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """Rows = methods: vanilla first, then by name, each labelled (lossy) where it is."""
    order = sorted(table.index, key=lambda m: (m != "vanilla", m))
    lossless = frame.groupby("method")["lossless"].first()
    table = table.loc[order]
    table.index = [method_label(m, bool(lossless[m])) for m in order]
    table.index.name = "method"
    return table


def speedup_table(frame: pd.DataFrame, per_question_means: bool = False) -> pd.DataFrame:
    """Rows = methods, columns = (task, Speedup | τ) then (Mean, ...), for one temperature."""
    sums = frame.groupby(["method", "task"])[["new_tokens", "wall_time", "steps"]].sum()
    rate = sums["new_tokens"] / sums["wall_time"]
    if per_question_means:
        rate = (frame["new_tokens"] / frame["wall_time"]).groupby([frame["method"], frame["task"]]).mean()
    tau = sums["new_tokens"] / sums["steps"]
    if "vanilla" in rate.index.get_level_values("method"):
        speedup = rate / rate.xs("vanilla", level="method")
    else:
        speedup = rate * float("nan")
    table = pd.concat({"Speedup": speedup.unstack("task"), "τ": tau.unstack("task")}, axis=1)
    table = table.swaplevel(0, 1, axis=1)
    tasks = list(dict.fromkeys(frame["task"]))
    for stat in ("Speedup", "τ"):
        table[("Mean", stat)] = table[[(t, stat) for t in tasks]].mean(axis=1)
    table = table[[(t, s) for t in [*tasks, "Mean"] for s in ("Speedup", "τ")]]
    return labelled_rows(table, frame)


def batch_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per decoded batch (a B=1 question is a batch of one): its tokens, target forwards and wall time."""
    keys = ["method", "lossless", "task", "temperature", "device", "repeat", "batch_size"]
    single = frame["batch_size"] == 1
    batch_id = frame["batch_index"].astype(str).where(~single, "q" + frame["question_id"])
    grouped = frame.assign(batch_id=batch_id).groupby(keys + ["batch_id"], sort=False)

    def per_turn_max(column: pd.Series) -> float:
        turns = list(column)
        return float(sum(max((t[i] for t in turns if i < len(t)), default=0) for i in range(max(map(len, turns)))))

    return grouped.agg(new_tokens=("new_tokens", "sum"), steps=("steps", "sum"), wall_time=("batch_wall_time", "max"),
                       forwards=("turn_steps", per_turn_max), verify_time=("turn_verify_time", per_turn_max),
                       draft_time=("draft_time", "sum")).reset_index()


def throughput_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows = methods, columns = (B=b, tok/s | Speedup) over all tasks: each method against vanilla at its own B."""
    batches = batch_frame(frame)
    sums = batches.groupby(["method", "batch_size"])[["new_tokens", "wall_time"]].sum()
    rate = sums["new_tokens"] / sums["wall_time"]
    columns = {}
    for size in sorted(batches["batch_size"].unique()):
        at = rate.xs(size, level="batch_size")
        base = at.get("vanilla", float("nan"))
        columns[(f"B={size}", "tok/s")] = at
        columns[(f"B={size}", "Speedup")] = at / base
    table = pd.DataFrame(columns)
    return labelled_rows(table, frame)


def batch_cost_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Where the time of a batch goes, per method and B: tokens emitted per target forward (all rows together),
    the forward's time (verification and cache compaction included) and the drafters' time (rows draft one after
    another), each per forward, in ms."""
    batches = batch_frame(frame)
    sums = batches.groupby(["method", "batch_size"])[["new_tokens", "forwards", "verify_time", "draft_time"]].sum()
    columns = {}
    for size in sorted(batches["batch_size"].unique()):
        at = sums.xs(size, level="batch_size")
        columns[(f"B={size}", "tokens/forward")] = at["new_tokens"] / at["forwards"]
        columns[(f"B={size}", "forward ms")] = 1000 * at["verify_time"] / at["forwards"]
        columns[(f"B={size}", "draft ms")] = 1000 * at["draft_time"] / at["forwards"]
    return labelled_rows(pd.DataFrame(columns), frame)


def leaderboard(table: pd.DataFrame, half: pd.DataFrame | None) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """One row per method over every task at once (a table made with task = "Overall"), fastest first."""
    keep = [("Overall", "Speedup"), ("Overall", "τ")]
    order = table[keep[0]].sort_values(ascending=False, kind="stable").index
    return table.loc[order, keep], (half.loc[order, keep] if half is not None else None)


def table_with_interval(frame: pd.DataFrame, per_question_means: bool = False) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The table (mean over repeats) and the half-widths of the 95% intervals, or None with a single repeat."""
    repeats = sorted(frame["repeat"].unique()) if "repeat" in frame else [0]
    if len(repeats) < 2:
        return speedup_table(frame, per_question_means), None
    tables = [speedup_table(frame[frame["repeat"] == r], per_question_means) for r in repeats]
    stacked = pd.concat(tables, keys=range(len(tables)))
    grouped = stacked.groupby(level=1, sort=False)
    mean, spread = grouped.mean(), grouped.std(ddof=1)
    order = tables[0].index
    factor = student_t.ppf(0.975, len(repeats) - 1) / len(repeats) ** 0.5
    half = (spread * factor).loc[order]
    mean = mean.loc[order]
    mean.index.name = half.index.name = "method"
    return mean, half


def format_table(table: pd.DataFrame, bold: tuple[str, str] = ("**", "**"),
                 half_width: pd.DataFrame | None = None) -> pd.DataFrame:
    """Two decimals, × on speedups, ± the interval when there is one, the best mean of each column in bold
    (vanilla's row competes too)."""
    text = table.copy().astype(object)
    for column in table.columns:
        suffix = "×" if column[1] == "Speedup" else ""
        digits = 1 if column[1] in ("tok/s", "forward ms", "draft ms") else 2
        best = None if column[1].endswith(" ms") else table[column].max()  # times: no "best"
        cells = []
        for method, v in table[column].items():
            if pd.isna(v):
                cells.append("—")
                continue
            cell = f"{v:.{digits}f}{suffix}"
            if half_width is not None and not pd.isna(half_width.loc[method, column]):
                cell += f" ± {half_width.loc[method, column]:.2f}"
            cells.append(f"{bold[0]}{cell}{bold[1]}" if v == best and table[column].notna().sum() > 1 else cell)
        text[column] = cells
    return text


def to_markdown(table: pd.DataFrame, half_width: pd.DataFrame | None = None) -> str:
    text = format_table(table, half_width=half_width)
    text.columns = [f"{task} {stat}" for task, stat in text.columns]
    return text.to_markdown(disable_numparse=True)


def to_latex(table: pd.DataFrame, caption: str, half_width: pd.DataFrame | None = None) -> str:
    text = format_table(table, bold=(r"\textbf{", "}"), half_width=half_width)
    text.columns = pd.MultiIndex.from_tuples(
        [(task.replace("_", r"\_"), stat) for task, stat in text.columns]
    )
    text.index = [m.replace("_", r"\_") for m in text.index]
    latex = text.style.to_latex(hrules=True, multicol_align="c", caption=caption, column_format="l" + "r" * text.shape[1])
    return latex.replace("×", r"$\times$").replace("τ", r"$\tau$").replace("±", r"$\pm$")


def provenance(info: dict[str, Any]) -> list[str]:
    """Lines saying where a table comes from: command, commit, target, device, versions, date."""
    env, settings = info.get("environment", {}), info.get("settings", {})
    return [
        f"command: {info.get('command', '?')}",
        f"git commit: {env.get('git_commit')}; started {info.get('started', '?')}"
        + (f"; resumed {', '.join(info['resumed'])}" if info.get("resumed") else ""),
        f"target: {settings.get('target', '?')} on {env.get('device', '?')} ({env.get('dtype', '?')}"
        + (f", {env['cuda_device']}" if env.get("cuda_device") else "")
        + f"); {env.get('cpu_count', '?')} CPUs, {env.get('torch_threads', '?')} torch threads",
        f"python {env.get('python', '?')}, torch {env.get('torch', '?')}, transformers {env.get('transformers', '?')}; "
        f"{env.get('platform', '?')}",
    ] + [line for line in [describe_load(info.get("load", []))] if line]


def write_table(table: pd.DataFrame, out_dir: Path, stem: str, caption: str, origin: list[str],
                half_width: pd.DataFrame | None = None) -> str:
    markdown = to_markdown(table, half_width)
    header = "\n".join(f"<!-- {line} -->" for line in origin)
    (out_dir / f"{stem}.md").write_text(f"{header}\n\n{caption}\n\n{markdown}\n", encoding="utf-8")
    tex_header = "\n".join(f"% {line}" for line in origin)
    (out_dir / f"{stem}.tex").write_text(f"{tex_header}\n{to_latex(table, caption, half_width)}", encoding="utf-8")
    numbers = table
    if half_width is not None:  # the CSV keeps numbers: each column followed by its ±95% half-width
        widths = half_width.rename(columns=lambda stat: f"{stat} ±95%", level=1)
        numbers = pd.concat([table, widths], axis=1)[[c for pair in zip(table.columns, widths.columns) for c in pair]]
    with (out_dir / f"{stem}.csv").open("w", encoding="utf-8") as f:
        f.write("".join(f"# {line}\n" for line in origin))
        numbers.to_csv(f)
    return markdown


def temperature_tables(part: pd.DataFrame, t: str, target: str, out_dir: Path, origin: list[str]) -> list[str]:
    """Every table of one temperature (and device kind); returns what to print."""
    printed = []
    repeats = part["repeat"].nunique()
    spread = f"; mean ± 95% interval over {repeats} repeats" if repeats > 1 else ""
    caption = (f"Speedup over vanilla (total tokens / total time) and mean accepted length τ, T={t}, {target}; "
               f"(lossy) marks methods that do not reproduce the target's distribution{spread}")
    table, half = table_with_interval(part)
    markdown = write_table(table, out_dir, f"speedup_T{t}", caption, origin, half)
    caption = f"Spec-Bench-style speedup (ratio of per-question mean tokens/s) and τ, T={t}, {target}{spread}"
    table, half = table_with_interval(part, per_question_means=True)
    write_table(table, out_dir, f"speedup_specbench_T{t}", caption, origin, half)
    printed.append(f"T={t}\n{markdown}")
    caption = (f"Leaderboard, T={t}, {target}: speedup over vanilla and τ over all tasks together (total tokens "
               f"/ total time; total tokens / total target forwards){spread}")
    board, board_half = leaderboard(*table_with_interval(part.assign(task="Overall")))
    board_md = write_table(board, out_dir, f"leaderboard_T{t}", caption, origin, board_half)
    printed.append(f"Leaderboard T={t}\n{board_md}")
    for task, rows in part.groupby("task", sort=False):
        if rows["category"].nunique() > 1:  # e.g. MT-bench's eight categories
            caption = f"{task} by category, T={t}, {target}: speedup over vanilla and τ per category{spread}"
            table, half = table_with_interval(rows.assign(task=rows["category"]))
            write_table(table, out_dir, f"categories_{task}_T{t}", caption, origin, half)
    if "vanilla" not in set(part["method"]):
        printed.append("(no vanilla records at this temperature: speedups cannot be computed)")
    return printed


def throughput_tables(part: pd.DataFrame, t: str, target: str, out_dir: Path, origin: list[str]) -> list[str]:
    """Throughput at each batch size: every B side by side over all tasks, then per task at each B."""
    caption = (f"Throughput, T={t}, {target}: tokens/s (total new tokens / total batch wall time) and speedup "
               "over vanilla at the same batch size B, all tasks together")
    markdown = write_table(throughput_table(part), out_dir, f"throughput_T{t}", caption, origin)
    caption = (f"Cost per target forward at each batch size B, T={t}, {target}: tokens emitted per forward by all rows "
               "together, the forward's time and the drafters' time per forward (ms; rows draft one after another)")
    costs = write_table(batch_cost_table(part), out_dir, f"batch_costs_T{t}", caption, origin)
    for size, at_size in part.groupby("batch_size"):
        caption = (f"Throughput speedup over vanilla at batch size {size} and τ, T={t}, {target}: total new tokens "
                   "/ total batch wall time, per task")
        batches = batch_frame(at_size).assign(category="", accept_lengths=None)
        write_table(speedup_table(batches), out_dir, f"throughput_T{t}_B{size}", caption, origin)
    return [f"Throughput T={t}\n{markdown}", f"Cost per forward T={t}\n{costs}"]


def runs_in(out_dir: Path) -> set[str]:
    """When the runs whose tables a report folder holds were started (from the tables' provenance headers)."""
    found = set()
    for table in out_dir.glob("*.md"):
        match = re.search(r"; started (\S+?)(?:;| -->)", table.read_text(encoding="utf-8")[:4000])
        if match:
            found.add(match.group(1))
    return found


def check_report_dir(out_dir: Path, started: str | None) -> None:
    """Refuse to write a run's tables over another run's (a committed report, say); the same run, resumed, may."""
    others = runs_in(out_dir) - {started}
    if others:
        raise SpecbenchError(f"{out_dir} holds the tables of another run (started {', '.join(sorted(others))}): "
                             "pass --report-dir DIR, or remove that folder first")


def build_report(run_dir: Path, out_dir: Path, plots: bool = True) -> str:
    records = read_records(run_dir)
    if not records:
        raise SpecbenchError(f"{run_dir}: no finished records yet")
    frame = per_question_frame(records)
    info = read_run_info(run_dir)
    check_report_dir(out_dir, info.get("started"))
    with folder_lock(out_dir, "report folder"):
        return _write_report(frame, info, out_dir, plots)


def _write_report(frame: pd.DataFrame, info: dict[str, Any], out_dir: Path, plots: bool) -> str:
    origin = provenance(info)
    target = info.get("settings", {}).get("target", "")
    printed = ["\n".join(origin)]
    kinds = sorted(frame["device"].unique())
    if len(kinds) > 1:  # a distributed run over mixed hardware: a speedup is only a ratio on one kind of device
        printed.append(f"this run mixes device kinds ({'; '.join(kinds)}): every table is computed per kind "
                       "(files suffixed _device<N>, in this order)")
    sizes = sorted(frame["batch_size"].unique())
    for (temperature, device), part in frame.groupby(["temperature", "device"]):
        t = f"{temperature:g}"
        if len(kinds) > 1:
            t = f"{t}_device{kinds.index(device) + 1}"
            target_on = f"{target} on {device}"
        else:
            target_on = target
        for size, at_size in part.groupby("batch_size"):
            if sizes == [1]:
                printed.extend(temperature_tables(at_size, t, target_on, out_dir, origin))
            else:
                printed.extend(temperature_tables(at_size, f"{t}_B{size}", f"{target_on}, batch size {size}",
                                                  out_dir, origin))
        if sizes != [1]:
            printed.extend(throughput_tables(part, t, target_on, out_dir, origin))
    if plots:
        from specbench.plots import make_plots

        written = make_plots(frame, out_dir)
        printed.append("plots: " + ", ".join(p.name for p in written))
    return "\n\n".join(printed)
