"""Plots for a report (PNG for a glance, PDF for a paper), one set per temperature, one colour per method in all:
speedup and τ per task per method (grouped bars with the tables' 95% intervals; vanilla is the dashed 1.0 line), the distribution of tokens per step (τ), the acceptance rate by draft
position, the time split per method (draft / verify / other per token), and speedup against an option for method
variants in a sweep (rows named like eagle@total_tokens=8). Runs at several batch sizes add throughput speedup
against B; the per-question plots then use the smallest B."""
from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator  # noqa: E402

from specbench.analysis.latency import turns_per_method  # noqa: E402
from specbench.analysis.tables import (  # noqa: E402
    display_names,
    intervals,
    method_label,
    method_order,
    question_counts,
    questions_note,
    short_labels,
    speedup_table,
    table_with_interval,
)
from specbench.analysis.throughput import throughput_table  # noqa: E402


def _save(fig, out_dir: Path, stem: str, marks: list[str]) -> list[Path]:
    """PNG and PDF; the report's marks (TIMING-ONLY, the load warning) over the figure and in the files' metadata."""
    if marks:
        fig.suptitle("\n".join(line for mark in marks for line in textwrap.wrap(mark, 110)), fontsize=6.5,
                     color="darkred")
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.pdf"]
    said = " | ".join(marks)
    fig.savefig(paths[0], dpi=150, metadata={"Description": said} if marks else None)
    fig.savefig(paths[1], metadata={"Subject": said} if marks else None)
    plt.close(fig)
    return paths


def method_colours(methods: list[str]) -> dict[str, tuple]:
    """One colour per method, the same in every figure of a report: the methods in name order over tab10 (tab20's
    dark shades, then its light ones, past ten); vanilla grey."""
    others = sorted((m for m in set(methods) if m != "vanilla"), key=method_order)
    palette = plt.get_cmap("tab10").colors if len(others) <= 10 else [
        plt.get_cmap("tab20").colors[i] for i in [*range(0, 20, 2), *range(1, 20, 2)]]
    colours = {m: palette[i % len(palette)] for i, m in enumerate(others)}
    return colours | {"vanilla": (0.5, 0.5, 0.5)}


def _full_labels(part: pd.DataFrame) -> dict[str, str]:
    """Each method's row label in the tables ("name (lossy)" where it is)."""
    lossless = part.groupby("method")["lossless"].first()
    return {m: method_label(m, bool(lossless[m])) for m in lossless.index}


def _labels(part: pd.DataFrame) -> dict[str, str]:
    """Each method's name in a legend: the method's name where that is unambiguous."""
    full = _full_labels(part)
    short = short_labels(list(full.values()), base_only=True)
    return {m: short[label] for m, label in full.items()}


def _methods(part: pd.DataFrame) -> list[str]:
    return sorted(set(part["method"]), key=method_order)


def _steps(part: pd.DataFrame, method: str) -> np.ndarray:
    """Tokens emitted per target forward, every step of every turn of a method."""
    return np.concatenate([np.asarray(a) for a in part.loc[part["method"] == method, "accept_lengths"]])


def speedup_figure(part: pd.DataFrame, colours: dict[str, tuple], t: str):
    """Speedup (top) and τ (bottom) per task and their mean, one bar per method beside vanilla's 1.0 line, with the
    95% intervals of the tables as error bars."""
    table, half = table_with_interval(part)
    bounds = intervals(table, half) if half is not None else None
    full, labels, names = _full_labels(part), _labels(part), display_names()
    methods = [m for m in _methods(part) if m != "vanilla"]
    tasks = [c[0] for c in table.columns if c[1] == "Speedup"]
    counts = question_counts(part)
    counts["Mean"] = counts.sum(axis=1)
    # a page's width (7 in), so that its text prints at about 7-9 pt in a two-column paper's figure*
    fig, axes = plt.subplots(2, 1, figsize=(max(7.0, 0.9 * len(tasks) + 0.7), 4.6), sharex=True, layout="constrained")
    width = 0.8 / len(methods)
    x = np.arange(len(tasks))
    for ax, stat in zip(axes, ("Speedup", "τ")):
        for i, method in enumerate(methods):
            row = full[method]
            values = [table.loc[row, (task, stat)] for task in tasks]
            errors = None if bounds is None else np.array(
                [[v - bounds[(task, stat)].loc[row, "low"], bounds[(task, stat)].loc[row, "high"] - v]
                 for task, v in zip(tasks, values)]).T
            # Bars grow from vanilla's 1.0 (up: faster, down: slower), on the log scale of their intervals.
            ax.bar(x + i * width - 0.4 + width / 2, np.asarray(values, float) - 1.0, width, bottom=1.0,
                   yerr=errors, capsize=1.5, error_kw={"elinewidth": 0.7}, color=colours[method],
                   label=labels[method])
        if stat == "Speedup":
            ratio_axis(ax)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_ylabel("speedup over vanilla (×)" if stat == "Speedup" else "τ (tokens per forward)", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(axis="y", linewidth=0.4, alpha=0.5)
        ax.set_axisbelow(True)
    axes[1].set_xticks(x, [f"{names.get(task, task)}\n{_n(counts[task])}" for task in tasks])
    axes[0].set_title(f"Speedup (log axis) and τ per task, T={t} (dashed: vanilla; error bars: 95% intervals; "
                      "n: questions)", fontsize=9)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=min(len(methods), 7),
               fontsize=7.5, frameon=False, handlelength=1.2, columnspacing=1.2)
    return fig


RATIO_TICKS = (0.1, 0.2, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 3, 4, 6, 8, 16, 32, 64, 128)
FINE_TICKS = (0.6, 0.7, 0.8, 0.9, 1, 1.1, 1.2, 1.3, 1.4, 1.6, 1.8)  # where the range holds fewer than 3 of those


def ratio_axis(ax) -> None:
    """A speedup axis on the log scale (its intervals' scale: 2x and 0.5x stand as far from 1x), ticked 0.5x, 1x,
    2x ... within the data's range."""
    ax.set_yscale("log", base=2)
    low, high = ax.get_ylim()
    ticks = [t for t in RATIO_TICKS if low <= t <= high]
    ax.yaxis.set_major_locator(FixedLocator(ticks if len(ticks) >= 3 else [t for t in FINE_TICKS if low <= t <= high]))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}×"))


def _n(counts: pd.Series) -> str:
    """"n=2", or "n=8–10" where the methods answered different numbers."""
    return f"n={counts.min()}" + (f"–{counts.max()}" if counts.max() != counts.min() else "")


def speedup_bars(part: pd.DataFrame, out_dir: Path, t: str, colours: dict[str, tuple], marks: list[str]) -> list[Path]:
    if set(part["method"]) == {"vanilla"}:
        return []  # nothing to compare
    return _save(speedup_figure(part, colours, t), out_dir, f"speedup_T{t}", marks)


def tau_distribution(part: pd.DataFrame, out_dir: Path, t: str, colours: dict[str, tuple],
                     marks: list[str]) -> list[Path]:
    labels = _labels(part)
    methods = [m for m in _methods(part) if m != "vanilla"]
    if not methods:
        return []
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    # lengths up to the last that 1% of some method's steps reach; the longer ones go to the last bar ("≥K")
    steps_of = {method: _steps(part, method) for method in methods}
    longest = max([k for steps in steps_of.values() for k in np.unique(steps) if (steps == k).mean() >= 0.01] + [1])
    lengths = np.arange(1, int(longest) + 1)
    width = 0.8 / len(methods)
    for i, method in enumerate(methods):
        steps = steps_of[method]
        share = [(steps == k).mean() if k < longest else (steps >= k).mean() for k in lengths]
        ax.bar(lengths + i * width - 0.4 + width / 2, share, width, color=colours[method],
               label=f"{labels[method]} (τ={steps.mean():.2f})")
    ax.set_xticks(lengths, [str(k) for k in lengths[:-1]] + [f"≥{lengths[-1]}" if longest > 1 else "1"])
    ax.set_xlabel("tokens emitted per target forward")
    ax.set_ylabel("share of steps")
    ax.set_title(f"Distribution of accepted length, T={t}, {questions_note(question_counts(part))}", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, out_dir, f"tau_distribution_T{t}", marks)


def acceptance_by_position(part: pd.DataFrame, out_dir: Path, t: str, colours: dict[str, tuple],
                           marks: list[str]) -> list[Path]:
    labels = _labels(part)
    methods = [m for m in _methods(part) if m != "vanilla"]
    if not methods:
        return []
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for method in methods:
        steps = _steps(part, method)
        depth = max(int(steps.max()) - 1, 1)
        positions = np.arange(1, depth + 1)
        # Draft position k was accepted when a step emitted more than k tokens (the bonus is the last one).
        ax.plot(positions, [(steps > k).mean() for k in positions], marker="o", color=colours[method],
                label=labels[method])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("draft position (depth in the accepted path)")
    ax.set_ylabel("share of steps accepting it")
    ax.set_ylim(0, 1)
    ax.set_title(f"Acceptance rate by draft position, T={t}, {questions_note(question_counts(part))}", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, out_dir, f"acceptance_by_position_T{t}", marks)


def time_split(part: pd.DataFrame, out_dir: Path, t: str, marks: list[str]) -> list[Path]:
    labels = _labels(part)
    methods = _methods(part)
    sums = part.groupby("method")[["new_tokens", "wall_time", "draft_time", "verify_time"]].sum().loc[methods]
    per_token = sums[["draft_time", "verify_time", "wall_time"]].div(sums["new_tokens"], axis=0) * 1000
    other = (per_token["wall_time"] - per_token["draft_time"] - per_token["verify_time"]).clip(lower=0)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(methods) + 2), 3.8))
    x = np.arange(len(methods))
    ax.bar(x, per_token["draft_time"], label="draft")
    ax.bar(x, per_token["verify_time"], bottom=per_token["draft_time"], label="verify (target forward + accept)")
    ax.bar(x, other, bottom=per_token["draft_time"] + per_token["verify_time"], label="other")
    ax.set_xticks(x, [labels[m] for m in methods], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ms per new token")
    ax.set_title(f"Where the time goes, T={t}, {questions_note(question_counts(part))}", fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, out_dir, f"time_split_T{t}", marks)


def sweeps(part: pd.DataFrame, out_dir: Path, t: str, marks: list[str]) -> list[Path]:
    """Speedup and τ against a numeric option, for methods run as several name@key=value variants."""
    table = speedup_table(part)
    points: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for method in set(part["method"]):
        base, _, opts = method.partition("@")
        pairs = [o.partition("=") for o in opts.split(":")] if opts else []
        if len(pairs) != 1:
            continue
        key, _, value = pairs[0]
        try:
            x = float(value)
        except ValueError:
            continue
        row = table.loc[method_label(method, bool(part.loc[part["method"] == method, "lossless"].iloc[0]))]
        points.setdefault((base, key), []).append((x, row[("Mean", "Speedup")], row[("Mean", "τ")]))
    written: list[Path] = []
    for (base, key), values in points.items():
        if len(values) < 2:
            continue
        values.sort()
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        ax.plot([v[0] for v in values], [v[1] for v in values], marker="o", label="speedup (×)")
        ax.plot([v[0] for v in values], [v[2] for v in values], marker="s", label="τ")
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xlabel(key)
        ax.set_title(f"{base}: mean over tasks against {key}, T={t}, {questions_note(question_counts(part))}",
                     fontsize=9)
        ax.legend(fontsize=8)
        written += _save(fig, out_dir, f"sweep_{base}_{key}_T{t}", marks)
    return written


def speedup_against_batch(part: pd.DataFrame, out_dir: Path, t: str, colours: dict[str, tuple],
                          marks: list[str]) -> list[Path]:
    table = throughput_table(part)
    sizes = [int(c[0].removeprefix("B=")) for c in table.columns if c[1] == "Speedup"]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    full, labels = _full_labels(part), _labels(part)
    for method in _methods(part):
        if method == "vanilla":
            continue
        ax.plot(sizes, [table.loc[full[method], (f"B={b}", "Speedup")] for b in sizes], marker="o",
                color=colours[method], label=labels[method])
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(b) for b in sizes])
    ax.set_xlabel("batch size B")
    ax.set_ylabel("throughput speedup over vanilla (×)")
    ax.set_title(f"Throughput speedup against batch size, T={t}, {questions_note(question_counts(part))} per B",
                 fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, out_dir, f"speedup_vs_batch_T{t}", marks)


def make_plots(frame: pd.DataFrame, out_dir: Path, marks: list[str]) -> list[Path]:
    """Every plot of a report; `marks` (TIMING-ONLY, the load warning) go on each."""
    written: list[Path] = []
    colours = method_colours(list(frame["method"]))
    for temperature, every_size in frame.groupby("temperature"):
        t = f"{temperature:g}"
        if every_size["batch_size"].nunique() > 1 and "vanilla" in set(every_size["method"]):
            written += speedup_against_batch(every_size, out_dir, t, colours, marks)
        part = every_size[every_size["batch_size"] == every_size["batch_size"].min()]
        if "vanilla" in set(part["method"]):
            written += speedup_bars(part, out_dir, t, colours, marks)
            written += sweeps(part, out_dir, t, marks)
        written += tau_distribution(part, out_dir, t, colours, marks)
        written += acceptance_by_position(part, out_dir, t, colours, marks)
        written += time_split(part, out_dir, t, marks)
    return written


def latency_cdf(samples: pd.DataFrame, out_dir: Path, stem: str, marks: list[str]) -> list[Path]:
    """Per task, the CDF of each method's inter-token latencies (ms; a step's later tokens at 0), one panel a task
    (its title: the turns per method), in the report's method colours; `marks` as make_plots."""
    itl = samples[samples["metric"] == "ITL"]
    tasks = list(dict.fromkeys(itl["task"]))
    if not tasks:
        return []
    colours, names = method_colours(list(itl["method"])), display_names()
    cols = min(3, len(tasks))
    rows = -(-len(tasks) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False, sharey=True)
    for ax, task in zip(axes.flat, tasks):
        for method, group in itl[itl["task"] == task].groupby("method", sort=False):
            values = np.sort([1e3 * v for s in group["samples"] for v in s])
            if len(values):
                ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", color=colours[method],
                        label=method, linewidth=1.0)
        ax.set_title(f"{names.get(task, task)} ({_n(turns_per_method(samples[samples['task'] == task]))} turns)",
                     fontsize=9)
        ax.set_xlabel("inter-token latency (ms)", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(tasks):]:
        ax.set_visible(False)
    axes[0][0].set_ylabel("share of tokens", fontsize=8)
    axes[0][0].legend(fontsize=6, frameon=False)
    return _save(fig, out_dir, stem, marks)
