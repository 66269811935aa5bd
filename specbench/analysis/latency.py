"""Per-token latency, as serving benchmarks report it, from the records' step_ends (schema 3 on; older records have
none and give no table): per turn, the time to first token (TTFT: the first step's end, prefill included), the time
per output token after the first (TPOT: (last token's time - first's) / (tokens - 1)), and every inter-token latency
(ITL: the gap between consecutive tokens). A step's tokens share its time, so a speculative step's later tokens
come 0 s after its first: a method's ITL shows both its long steps and its free tokens. Percentiles p50/p95/p99 per
method and task (all tasks pooled as "all"), at one temperature and batch size; at batch size above one every row
of a batch counts on its own, with the batch's shared step times.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.analysis.tables import labelled_rows
from specbench.run.record import Record

PERCENTILES = (50, 95, 99)
METRICS = ("TTFT", "TPOT", "ITL")


def token_times(step_ends: list[float], accept_lengths: list[int]) -> list[float]:
    """When each token of a turn was known: every token of a step at that step's end."""
    return [end for end, emitted in zip(step_ends, accept_lengths) for _ in range(emitted)]


def turn_latency(step_ends: list[float], accept_lengths: list[int]) -> dict[str, list[float]]:
    """One turn's TTFT and TPOT (a value each, when it has one and two tokens) and its ITLs, in seconds."""
    times = token_times(step_ends, accept_lengths)
    out: dict[str, list[float]] = {"TTFT": times[:1], "TPOT": [], "ITL": [b - a for a, b in zip(times, times[1:])]}
    if len(times) > 1:
        out["TPOT"] = [(times[-1] - times[0]) / (len(times) - 1)]
    return out


def latency_samples(records: list[Record]) -> pd.DataFrame:
    """One row per (record, metric) with every sample of the record's turns: method, lossless, task, temperature,
    batch_size, metric, samples (seconds)."""
    rows = []
    for r in records:
        if not r.choice.step_ends:
            continue
        samples: dict[str, list[float]] = {m: [] for m in METRICS}
        for ends, lengths in zip(r.choice.step_ends, r.choice.accept_lengths):
            for metric, values in turn_latency(ends, lengths).items():
                samples[metric].extend(values)
        rows += [{"method": r.method, "lossless": r.lossless, "task": r.task, "temperature": r.temperature,
                  "batch_size": r.batch_size, "metric": m, "samples": samples[m]} for m in METRICS]
    return pd.DataFrame(rows, columns=["method", "lossless", "task", "temperature", "batch_size", "metric", "samples"])


def latency_table(samples: pd.DataFrame, task: str | None = None) -> pd.DataFrame:
    """Rows = methods, columns = (metric, "pNN ms"): the percentiles in milliseconds over one task's samples (every
    task's when task is None). Empty where a method has no sample of a metric."""
    part = samples if task is None else samples[samples["task"] == task]
    table = {}
    for (method, metric), group in part.groupby(["method", "metric"], sort=False):
        values = np.array([v for s in group["samples"] for v in s], dtype=float)
        for p in PERCENTILES:
            table.setdefault(method, {})[(metric, f"p{p} ms")] = 1e3 * np.percentile(values, p) if len(values) else np.nan
    out = pd.DataFrame.from_dict(table, orient="index")
    out = out[[(m, f"p{p} ms") for m in METRICS for p in PERCENTILES]]
    out.columns = pd.MultiIndex.from_tuples(out.columns)
    return labelled_rows(out, part)


def turns_per_method(samples: pd.DataFrame) -> pd.Series:
    """How many turns each method's samples come from (one TTFT a turn), in the samples' order."""
    ttft = samples[samples["metric"] == "TTFT"]
    return ttft.groupby("method", sort=False)["samples"].apply(lambda rows: sum(len(r) for r in rows))


def latency_long(samples: pd.DataFrame) -> pd.DataFrame:
    """Every task's table and the pooled one stacked: rows (method, task), flat columns (TTFT p50 ms, ...)."""
    tasks = [*dict.fromkeys(samples["task"]), None]
    parts = []
    for task in tasks:
        table = latency_table(samples, task)
        table.columns = [f"{metric} {stat}" for metric, stat in table.columns]
        parts.append(table.assign(task=task or "all").set_index("task", append=True))
    return pd.concat(parts).round(2)
