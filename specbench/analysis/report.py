"""`specbench report`: speedup over vanilla and mean accepted length τ per method and task, one table per
temperature in the EAGLE paper's layout (rows = methods; per task a Speedup and a τ column; then the mean; the best
method per column in bold, vanilla being the reference), as Markdown, LaTeX (a booktabs float for a paper:
specbench.analysis.latex) and CSV (one header row, rounded), plus plots (specbench.analysis.plots).

Speedup (our headline) = (total new tokens / total wall time) of a method ÷ the same for vanilla, per task.
Speedup, Spec-Bench style (speedup_specbench_*) = mean over questions of the method's tokens/s ÷ the same mean for
vanilla: a ratio of per-question means, which weighs short answers more.
τ = total new tokens / total target forwards (bonus token included, so vanilla's τ is 1.00).
The mean column averages the per-task values. Every file starts with the run's provenance.
With the hf-compiled reference row (run --reference, specbench.run.reference): speedup_vs_hf_compiled_* (speedups
over it instead of vanilla) and a "Speedup vs hf-compiled" column in the leaderboard.
Runs with --batch-size B > 1 (or several sizes): the tables above are made per batch size (suffix _B<b>), and
throughput tables compare tokens/s = total new tokens / total batch wall time of each method with vanilla's at the
same B (throughput_T<t>: every B side by side over all tasks; throughput_T<t>_B<b>: per task), plus a plot of
throughput speedup against B.
With --repeats N (N ≥ 2) every cell is the mean over the N repeats ± the half-width of its 95% Student-t interval
(each repeat's table computed on its own, so the interval shows run-to-run variation on this machine); with one
repeat, the 95% interval over the questions, each paired with vanilla's answer (specbench.analysis.intervals).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from specbench.analysis.budget import budget_table
from specbench.analysis.efficiency import (
    DIGITS,
    efficiency_frame,
    efficiency_notes,
    efficiency_table,
    formatted,
    run_facts,
)
from specbench.analysis.goodput import goodput_frame, goodput_table
from specbench.analysis.latency import latency_long, latency_samples, latency_table
from specbench.analysis.latex import flat_latex, to_latex
from specbench.analysis.notes import caption_notes, fewer_questions, latency_note
from specbench.analysis.profiles import profiles_line, write_profiles
from specbench.analysis.report_folder import check_report_dir
from specbench.analysis.tables import (
    display_names,
    flat_frame,
    leaderboard,
    per_question_frame,
    question_counts,
    questions_note,
    speedup_table,
    table_with_interval,
    to_markdown,
    uneven_counts,
    with_reference_column,
)
from specbench.analysis.throughput import batch_cost_table, batch_frame, throughput_counts, throughput_table
from specbench.analysis.verify import write_made_from
from specbench.errors import SpecbenchError
from specbench.run.load import describe as describe_load
from specbench.run.lock import folder_lock
from specbench.run.record import Record
from specbench.run.records import read_records
from specbench.run.registry import COMPILED
from specbench.run.run_info import RunInfo, read_run_info, uncaptured_note
from specbench.run.timing_only import run_timing_only


def provenance(info: RunInfo) -> list[str]:
    """Lines saying where a table comes from: command, commit, target, device, versions, date."""
    env, settings = info.environment, info.settings
    return [
        f"command: {info.command or '?'}",
        f"git commit: {env.get('git_commit')}; started {info.started or '?'}"
        + (f"; resumed {', '.join(info.resumed)}" if info.resumed else ""),
        f"target: {settings.get('target', '?')} on {env.get('device', '?')} ({env.get('dtype', '?')}"
        + (f", {env['cuda_device']}" if env.get("cuda_device") else "")
        + f"); {env.get('cpu_count', '?')} CPUs, {env.get('torch_threads', '?')} torch threads",
        f"python {env.get('python', '?')}, torch {env.get('torch', '?')}, transformers {env.get('transformers', '?')}; "
        f"{env.get('platform', '?')}",
    ] + [line for line in [describe_load(info.load), uncaptured_note(info), refused_costs(info)] if line]


def refused_costs(info: RunInfo) -> str | None:
    """The header's line for a run that decided with a cost curve refused for storing (measured beside other work,
    or unsteady): what the cost-sized choices (EAGLE's tree sizes) rested on."""
    costs = info.costs or {}
    source, measured = costs.get("source") or "", costs.get("measured") or {}
    if "refused for storing" not in source:
        return None
    loads = measured.get("loads") or []
    load = f"; others' load up to {max(loads):.0%} while it was measured" if loads else ""
    return f"costs: {source}{load}"


def report_labels(info: RunInfo) -> tuple[list[str], str, list[str]]:
    """The provenance lines of every file, the target as every caption names it, and the marks every caption and
    plot carries (TIMING-ONLY, the load warning, UNCAPTURED: in the caption, not only in a comment a PDF loses)."""
    origin, target, only = provenance(info), str(info.settings.get("target", "")), run_timing_only(info.settings)
    marks = [line for line in (only, describe_load(info.load), uncaptured_note(info)) if line]
    return [*origin, only] if only else origin, f"{target} ({'; '.join(marks)})" if marks else target, marks


def write_table(table: pd.DataFrame, out_dir: Path, stem: str, caption: str, origin: list[str],
                half_width: pd.DataFrame | None = None, counts: pd.DataFrame | None = None, notes: str = "",
                tag: str = "", pairs: pd.DataFrame | None = None, unit: str = "task") -> str:
    """stem.md (every cell's interval), stem.tex (a float for a paper, specbench.analysis.latex) and stem.csv
    (one header row, rounded numbers). The caption gets the number of questions when `counts` are given, then
    `notes` (caption_notes: what the intervals and (lossy) mean). `pairs` (uneven_counts): the questions a speedup
    is over, in its cell, where fewer than the rows finished. The LaTeX label is tab:TAG:STEM (TAG: the run
    folder's name, so that the tables of several reports can share a paper). `unit`: what a column of `counts`
    is (a task, or a category of one task's questions)."""
    caption += f", {questions_note(counts, unit)}." if counts is not None else "."
    if pairs is not None:
        caption += (" A speedup is over the questions both rows finished; (n=N): the questions behind a cell where "
                    "they are not vanilla's.")
    markdown = to_markdown(table, half_width, pairs)
    tex_notes = notes
    if half_width is not None and len(set(table.columns.get_level_values(0))) > 1:
        tex_notes = notes.replace(".", f"; shown on the mean only, every cell's in {stem}.csv.", 1)
    label = f"tab:{tag}:{stem}" if tag else f"tab:{stem}"
    write_files(out_dir, stem, origin, f"{caption} {notes}".rstrip() + f"\n\n{markdown}",
                to_latex(table, f"{caption} {tex_notes}".rstrip(), half_width, label=label, counts=pairs),
                flat_frame(table, half_width, counts, pairs=pairs))
    return markdown


def write_files(out_dir: Path, stem: str, origin: list[str], markdown: str, latex: str, csv: pd.DataFrame,
                csv_index: bool = True) -> None:
    """stem.md, stem.tex and stem.csv, each headed by the run's provenance in its own comment syntax."""
    header = "\n".join(f"<!-- {line} -->" for line in origin)
    (out_dir / f"{stem}.md").write_text(f"{header}\n\n{markdown}\n", encoding="utf-8")
    tex_header = "\n".join(f"% {line}" for line in origin)
    (out_dir / f"{stem}.tex").write_text(f"{tex_header}\n{latex}", encoding="utf-8")
    with (out_dir / f"{stem}.csv").open("w", encoding="utf-8") as f:
        f.write("".join(f"# {line}\n" for line in origin))
        csv.to_csv(f, index=csv_index)


def temperature_tables(part: pd.DataFrame, t: str, target: str, out_dir: Path, origin: list[str],
                       tag: str = "") -> list[str]:
    """Every table of one temperature (and device kind); returns what to print. t: the files' tag (the
    temperature, and the batch size or device kind where there are several); captions name them in words."""
    printed = []
    shown = f"{part['temperature'].iloc[0]:g}"
    fewer = fewer_questions(part)
    if fewer:
        printed.append(f"warning: T={shown}, {target}: fewer questions finished than vanilla ({fewer}): their "
                       "speedups are over the questions both finished")
    notes = caption_notes(part)
    counts, pairs = question_counts(part), uneven_counts(part)
    caption = f"Speedup over vanilla (tokens/s) and τ (tokens per target forward), T={shown}, {target}"
    table, half = table_with_interval(part)
    markdown = write_table(table, out_dir, f"speedup_T{t}", caption, origin, half, counts, notes, tag, pairs)
    caption = f"Spec-Bench-style speedup (ratio of per-question mean tokens/s) and τ, T={shown}, {target}"
    table, half = table_with_interval(part, per_question_means=True)
    write_table(table, out_dir, f"speedup_specbench_T{t}", caption, origin, half, counts, notes, tag, pairs)
    printed.append(f"T={shown}\n{markdown}")
    reference = COMPILED in set(part["method"])
    if reference:
        caption = (f"Speedup over {COMPILED} (HF generate, static KV cache, torch.compile; tokens/s) and τ, T={shown}, "
                   f"{target}")
        table, half = table_with_interval(part, baseline=COMPILED)
        markdown = write_table(table, out_dir, f"speedup_vs_hf_compiled_T{t}", caption, origin, half, counts,
                               notes.replace("vanilla's", f"{COMPILED}'s"), tag, uneven_counts(part, COMPILED))
        printed.append(f"T={shown}, speedup over {COMPILED}\n{markdown}")
    caption = f"Leaderboard, T={shown}, {target}: speedup over vanilla" + (f" and over {COMPILED}" if reference else "") \
        + " and τ over all tasks together"
    overall = part.assign(question_id=part["task"] + "/" + part["question_id"], task="Overall")
    board, board_half = leaderboard(*table_with_interval(overall))
    board_notes = notes
    if reference:
        board, board_half = with_reference_column(board, board_half, *table_with_interval(overall, baseline=COMPILED))
        board_notes = notes.replace("vanilla's", f"vanilla's (over {COMPILED}: with {COMPILED}'s)")
    board_pairs = uneven_counts(overall)
    board_md = write_table(board, out_dir, f"leaderboard_T{t}", caption, origin, board_half,
                           question_counts(overall).loc[board.index], board_notes, tag,
                           None if board_pairs is None else board_pairs.reindex(board.index)[[("Overall", "Speedup")]])
    printed.append(f"Leaderboard T={shown}\n{board_md}")
    for task, rows in part.groupby("task", sort=False):
        if rows["category"].nunique() > 1:  # e.g. MT-bench's eight categories
            caption = f"{display_names().get(task, task)} by category, T={shown}, {target}"
            by_category = rows.assign(task=rows["category"])
            table, half = table_with_interval(by_category)
            write_table(table, out_dir, f"categories_{task}_T{t}", caption, origin, half,
                        question_counts(by_category), notes, tag, uneven_counts(by_category), unit="category")
    if "vanilla" not in set(part["method"]):
        printed.append("(no vanilla records at this temperature: speedups cannot be computed)")
    return printed


def throughput_tables(part: pd.DataFrame, t: str, target: str, out_dir: Path, origin: list[str],
                      tag: str = "") -> list[str]:
    """Throughput at each batch size: every B side by side over all tasks, then per task at each B."""
    shown = f"{part['temperature'].iloc[0]:g}"
    caption = (f"Throughput, T={shown}, {target}: tokens/s (total new tokens / total batch wall time) and speedup "
               "over vanilla at the same batch size B (on the batches both decoded), all tasks together; "
               + "; ".join(f"B={size}: {questions_note(question_counts(at))}" for size, at in part.groupby("batch_size")))
    markdown = write_table(throughput_table(part), out_dir, f"throughput_T{t}", caption, origin, tag=tag,
                           pairs=throughput_counts(part))
    caption = (f"Cost per target forward at each batch size B, T={shown}, {target}: tokens emitted per forward by all rows "
               "together, the forward's time and the drafters' time per forward (ms; all rows' drafting in the step, a "
               "batched drafting call's time split evenly across its rows)")
    costs = write_table(batch_cost_table(part), out_dir, f"batch_costs_T{t}", caption, origin, tag=tag)
    for size, at_size in part.groupby("batch_size"):
        caption = (f"Throughput speedup over vanilla at batch size {size} and τ, T={shown}, {target}: total new tokens "
                   "/ total batch wall time on the batches both decoded, per task")
        batches = batch_frame(at_size).assign(category="", accept_lengths=None)
        write_table(speedup_table(batches), out_dir, f"throughput_T{t}_B{size}", caption, origin,
                    counts=question_counts(at_size), tag=tag)
    return [f"Throughput T={shown}\n{markdown}", f"Cost per forward T={shown}\n{costs}"]


def build_report(run_dir: Path, out_dir: Path, plots: bool = True, slo_tpot_ms: float | None = None) -> str:
    """Every table of the run's records into out_dir (goodput tables only with a TPOT bound, slo_tpot_ms)."""
    records = read_records(run_dir)
    if not records:
        raise SpecbenchError(f"{run_dir}: no finished records yet")
    frame = per_question_frame(records)
    info = read_run_info(run_dir)
    check_report_dir(out_dir, info.started or None)
    with folder_lock(out_dir, "report folder"):
        printed = _write_report(frame, latency_samples(records), info, out_dir, plots, run_dir.resolve().name)
        printed += run_cost_tables(records, info, out_dir, run_dir.resolve().name, slo_tpot_ms)
        printed += profiles_line(write_profiles(records, info, out_dir))
        options = [] if slo_tpot_ms is None else ["--slo-tpot-ms", f"{slo_tpot_ms:g}"]
        write_made_from(run_dir, out_dir, options, run_timing_only(info.settings))  # the records, for `report --verify`
        note = uncaptured_note(info)  # also in every table's header and caption
        return f"{note}\n\n{printed}" if note else printed


def latency_tables(samples: pd.DataFrame, out_dir: Path, origin: list[str], target: str, tag: str,
                   plots: bool, marks: list[str]) -> list[Path]:
    """latency_T<t>[_B<b>]: TTFT, TPOT and ITL percentiles per method, per task and over all tasks (md and csv),
    the pooled table as a LaTeX float (specbench.analysis.latency), and latency_cdf_T<t>[_B<b>] (ITL per task).
    Nothing for records without step times. Returns the plots it wrote."""
    sizes = sorted(samples["batch_size"].unique())
    written: list[Path] = []
    for (temperature, size), part in samples.groupby(["temperature", "batch_size"]):
        stem = f"latency_T{temperature:g}" + ("" if sizes == [1] else f"_B{size}")
        caption = (f"Per-token latency (ms): time to first token, time per output token after it, and inter-token "
                   f"latency (a step's tokens share its time), p50/p95/p99 over all tasks' turns, T={temperature:g}, "
                   f"{target}" + (f", batch size {size}" if sizes != [1] else "") + f", {latency_note(part)}.")
        long = latency_long(part).reset_index()
        if (long["ITL p50 ms"] == 0).any():
            caption += (" An ITL p50 of 0.00 ms: most of that method's tokens came after the first of their step, "
                        "at the step's time (0 ms after it).")
        write_files(out_dir, stem, origin, f"{caption} Per task, then all tasks.\n\n{long.to_markdown(index=False)}",
                    to_latex(latency_table(part), caption, label=f"tab:{tag}:{stem}" if tag else f"tab:{stem}"),
                    long, csv_index=False)
        if plots:
            from specbench.analysis.plots import latency_cdf

            written += latency_cdf(part, out_dir, stem.replace("latency", "latency_cdf"), marks)
    return written


def _write_report(frame: pd.DataFrame, latency: pd.DataFrame, info: RunInfo, out_dir: Path, plots: bool,
                  tag: str = "") -> str:
    origin, target, marks = report_labels(info)  # every caption says TIMING-ONLY and the load warning
    printed = ["\n".join(origin)]
    kinds = sorted(frame["device"].unique())
    if len(kinds) > 1:  # a distributed run over mixed hardware: a speedup is only a ratio on one kind of device
        printed.append(f"this run mixes device kinds ({'; '.join(kinds)}): every table is computed per kind "
                       "(files suffixed _device<N>, in this order)")
    budget = budget_table(info)
    header = "\n".join(f"<!-- {line} -->" for line in origin)
    (out_dir / "budget.md").write_text(f"{header}\n\nWhat each method got: its settings and its drafter's training "
                                       f"budget.\n\n{budget}\n", encoding="utf-8")
    printed.append(f"What each method got (budget.md):\n{budget}")
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
                printed.extend(temperature_tables(at_size, t, target_on, out_dir, origin, tag))
            else:
                printed.extend(temperature_tables(at_size, f"{t}_B{size}", f"{target_on}, batch size {size}",
                                                  out_dir, origin, tag))
        if sizes != [1]:
            printed.extend(throughput_tables(part, t, target_on, out_dir, origin, tag))
    latency_plots = latency_tables(latency, out_dir, origin, target, tag, plots, marks)
    if plots:
        from specbench.analysis.plots import make_plots

        written = make_plots(frame, out_dir, marks)
        printed.append("plots: " + ", ".join(p.name for p in [*written, *latency_plots]))
    return "\n\n".join(printed)


def run_cost_tables(records: list[Record], info: RunInfo, out_dir: Path, tag: str, slo_tpot_ms: float | None) -> str:
    """efficiency_T<t>[_B<b>] (roofline and energy per method, specbench.analysis.efficiency; none for records from
    before schema 4) and, with a TPOT bound, goodput_T<t>[_B<b>] (specbench.analysis.goodput; records from schema
    3 on); returns what to print."""
    origin, target, _ = report_labels(info)
    facts, copy_gbps = run_facts(info)
    sizes = sorted({r.batch_size for r in records})
    frames = {"efficiency": efficiency_frame(records, facts)}
    if slo_tpot_ms is not None:
        frames["goodput"] = goodput_frame(records, slo_tpot_ms / 1e3)
    printed = []
    for name, frame in frames.items():
        for (temperature, size), part in frame.groupby(["temperature", "batch_size"]):
            stem = f"{name}_T{temperature:g}" + ("" if sizes == [1] else f"_B{size}")
            at = f"T={temperature:g}, {target}" + (f", batch size {size}" if sizes != [1] else "")
            if name == "efficiency":
                caption = (f"Roofline and energy per method, {at}: the bytes each decoding forward must read (weights "
                           "and keys/values at its context), its time, the bandwidth achieved and its share of the "
                           f"copy bandwidth; joules per emitted token. {efficiency_notes(info, part)}")
                text = formatted(efficiency_table(part, copy_gbps), DIGITS)
            else:
                caption = (f"Goodput under a TPOT bound of {slo_tpot_ms:g} ms, {at}: turns (rows) whose time per "
                           "output token after the first is within it, tokens/s of all turns and of those (goodput).")
                text = formatted(goodput_table(part), {"turns": 0, "met SLO %": 1})
            markdown = f"{caption}\n\n{text.to_markdown(index=False, disable_numparse=True)}"
            label = f"tab:{tag}:{stem}" if tag else f"tab:{stem}"
            write_files(out_dir, stem, origin, markdown, flat_latex(text, caption, label), text, csv_index=False)
            printed.append(f"\n\n{stem}\n{markdown}")
    return "".join(printed)
