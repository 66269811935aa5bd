"""The report's tables at batch sizes: each decoded batch as one row, tokens/s and the speedup over vanilla at each
B over all tasks, the questions behind a cell, and where a batch's time goes."""
from __future__ import annotations

import pandas as pd

from specbench.analysis.pairs import finished, paired_speedups, paired_with
from specbench.analysis.tables import labelled_rows


def batch_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per decoded batch (a B=1 question is a batch of one): its tokens, target forwards and wall time; its
    question_id is the batch's (the batch index, or the question at B=1), to pair it with the baseline's."""
    keys = ["method", "lossless", "task", "temperature", "device", "repeat", "batch_size"]
    single = frame["batch_size"] == 1
    batch_id = frame["batch_index"].astype(str).where(~single, "q" + frame["question_id"])
    grouped = frame.assign(batch_id=batch_id).groupby(keys + ["batch_id"], sort=False)

    def per_turn_max(column: pd.Series) -> float:
        turns = list(column)
        return float(sum(max((t[i] for t in turns if i < len(t)), default=0) for i in range(max(map(len, turns)))))

    return grouped.agg(new_tokens=("new_tokens", "sum"), steps=("steps", "sum"), wall_time=("batch_wall_time", "max"),
                       forwards=("turn_steps", per_turn_max), verify_time=("turn_verify_time", per_turn_max),
                       draft_time=("draft_time", "sum"), turns=("turns", "max")).reset_index().assign(
                           question_id=lambda batches: batches["batch_id"])


def throughput_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows = methods, columns = (B=b, tok/s | Speedup) over all tasks: each method's tokens/s over its batches, and
    its speedup over vanilla at its own B on the batches both decoded."""
    batches = batch_frame(frame)
    columns = {}
    for size, at in batches.groupby("batch_size"):
        every = at.assign(task="all", question_id=at["task"] + "/" + at["batch_id"])
        sums = every.groupby("method")[["new_tokens", "wall_time"]].sum()
        columns[(f"B={size}", "tok/s")] = sums["new_tokens"] / sums["wall_time"]
        speedup = paired_speedups(every)[0]  # empty without vanilla at this B
        columns[(f"B={size}", "Speedup")] = speedup.xs("all", level="task") if len(speedup) else sums["wall_time"] * float("nan")
    table = pd.DataFrame(columns)
    return labelled_rows(table, frame)


def throughput_counts(frame: pd.DataFrame) -> pd.DataFrame | None:
    """Rows = methods (labelled), columns as throughput_table's: the questions behind a cell where they are not
    vanilla's at that B (tok/s: the method's own; Speedup: those it shares with vanilla), NaN elsewhere; None where
    every method decoded vanilla's questions."""
    columns = {}
    for size, at in frame.groupby("batch_size"):
        own = finished(at)
        if "vanilla" not in own.index:
            continue
        shared = finished(paired_with(at)).reindex(own.index).fillna(0)
        columns[(f"B={size}", "tok/s")] = own.where(own != own["vanilla"])
        columns[(f"B={size}", "Speedup")] = shared.where((shared != own["vanilla"]) | (shared != own))
    table = pd.DataFrame(columns)
    return None if table.isna().all().all() else labelled_rows(table, frame)


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
