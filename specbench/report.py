"""`specbench report`: speedup over vanilla and mean accepted length τ per method and task, one table per
temperature, as Markdown, LaTeX (booktabs) and CSV.

Speedup = (total new tokens / total wall time) of a method ÷ the same for vanilla in the same run and task.
τ = total new tokens / total target forwards (bonus token included, so vanilla's τ is 1.00).
The mean column averages the per-task values.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from specbench.errors import SpecbenchError
from specbench.records import read_records, read_run_info


def per_question_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for r in records:
        choice = r["choices"][0]
        rows.append({
            "method": r["method"], "lossless": r.get("lossless", True), "task": r["task"],
            "temperature": float(r["temperature"]), "question_id": str(r["question_id"]),
            "new_tokens": sum(choice["new_tokens"]), "wall_time": sum(choice["wall_time"]),
            "steps": sum(choice["decoding_steps"]),
        })
    return pd.DataFrame(rows)


def method_label(method: str, lossless: bool) -> str:
    return method if lossless else f"{method} (lossy)"


def speedup_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows = methods, columns = (task, Speedup | τ) then (Mean, ...), for one temperature."""
    sums = frame.groupby(["method", "task"])[["new_tokens", "wall_time", "steps"]].sum()
    rate = sums["new_tokens"] / sums["wall_time"]
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
    order = sorted(table.index, key=lambda m: (m != "vanilla", m))
    lossless = frame.groupby("method")["lossless"].first()
    table = table.loc[order]
    table.index = [method_label(m, bool(lossless[m])) for m in order]
    table.index.name = "method"
    return table


def format_table(table: pd.DataFrame) -> pd.DataFrame:
    text = table.copy().astype(object)
    for column in table.columns:
        suffix = "×" if column[1] == "Speedup" else ""
        text[column] = [("—" if pd.isna(v) else f"{v:.2f}{suffix}") for v in table[column]]
    return text


def to_markdown(table: pd.DataFrame) -> str:
    text = format_table(table)
    text.columns = [f"{task} {stat}" for task, stat in text.columns]
    return text.to_markdown(disable_numparse=True)


def to_latex(table: pd.DataFrame, caption: str) -> str:
    text = format_table(table)
    text.columns = pd.MultiIndex.from_tuples(
        [(task.replace("_", r"\_"), stat) for task, stat in text.columns]
    )
    text.index = [m.replace("_", r"\_") for m in text.index]
    latex = text.style.to_latex(hrules=True, multicol_align="c", caption=caption, column_format="l" + "r" * text.shape[1])
    return latex.replace("×", r"$\times$").replace("τ", r"$\tau$")


def build_report(run_dir: Path, out_dir: Path) -> str:
    records = read_records(run_dir)
    if not records:
        raise SpecbenchError(f"{run_dir}: no finished records yet")
    frame = per_question_frame(records)
    info = read_run_info(run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    printed = []
    for temperature, part in frame.groupby("temperature"):
        table = speedup_table(part)
        stem = f"speedup_T{temperature:g}"
        caption = f"Speedup over vanilla and mean accepted length τ, T={temperature:g} ({info.get('settings', {}).get('target', '')})"
        markdown = to_markdown(table)
        (out_dir / f"{stem}.md").write_text(f"{caption}\n\n{markdown}\n", encoding="utf-8")
        (out_dir / f"{stem}.tex").write_text(to_latex(table, caption), encoding="utf-8")
        table.to_csv(out_dir / f"{stem}.csv")
        printed.append(f"T={temperature:g}\n{markdown}")
        if "vanilla" not in set(part["method"]):
            printed.append("(no vanilla records at this temperature: speedups cannot be computed)")
    return "\n\n".join(printed)
