"""Goodput under a TPOT bound (`report --slo-tpot-ms X`), as vLLM's `bench serve` reports it: a turn (a row of a
batch, at batch size above one) meets the bound when its time per output token after the first
(specbench.analysis.latency) is at most X ms; a turn of fewer than two tokens has no such time and meets it (vLLM
counts a one-token request's TPOT as 0). Per method and task (all tasks pooled as "all"), at one temperature and
batch size:
    met SLO % = turns meeting the bound / turns,
    tokens/s = every turn's tokens / the wall time of the generate calls that decoded them (a batch's counted once),
    goodput tokens/s = the tokens of the turns meeting the bound / that same wall time.
"""
from __future__ import annotations

import pandas as pd

from specbench.analysis.latency import turn_latency
from specbench.analysis.tables import labelled_rows
from specbench.analysis.turns import turn_groups
from specbench.run.record import Record

COLUMNS = ["turns", "met SLO %", "tokens/s", "goodput tokens/s"]


def meets(step_ends: list[float], accept_lengths: list[int], slo_s: float) -> bool:
    """The turn's TPOT is within the bound (1 ns of float error forgiven: step times are kept in microseconds)."""
    tpot = turn_latency(step_ends, accept_lengths)["TPOT"]
    return not tpot or tpot[0] <= slo_s + 1e-9


def goodput_frame(records: list[Record], slo_s: float) -> pd.DataFrame:
    """One row per generate call with step times: method, lossless, task, temperature, batch_size, turns, turns
    meeting the bound, tokens, tokens of those turns, the call's wall time."""
    rows = []
    for (method, task, temperature, size, *_), pairs in turn_groups(records).items():
        pairs = [(r, t) for r, t in pairs if len(r.choice.step_ends) > t]
        if not pairs:
            continue
        good = [meets(r.choice.step_ends[t], r.choice.accept_lengths[t], slo_s) for r, t in pairs]
        walls = [r.choice.batch_wall_time[t] if r.choice.batch_wall_time else r.choice.wall_time[t] for r, t in pairs]
        tokens = [r.choice.new_tokens[t] for r, t in pairs]
        rows.append({"method": method, "lossless": pairs[0][0].lossless, "task": task, "temperature": temperature,
                     "batch_size": size, "turns": len(pairs), "met": sum(good), "tokens": sum(tokens),
                     "good_tokens": sum(n for n, g in zip(tokens, good) if g), "wall": max(walls)})
    return pd.DataFrame(rows, columns=["method", "lossless", "task", "temperature", "batch_size", "turns", "met",
                                       "tokens", "good_tokens", "wall"])


def goodput_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows (method, task), every task's then "all": COLUMNS."""
    parts = []
    for task in [*dict.fromkeys(frame["task"]), None]:
        part = frame if task is None else frame[frame["task"] == task]
        sums = part.groupby("method", sort=False)[["turns", "met", "tokens", "good_tokens", "wall"]].sum()
        table = pd.DataFrame({"turns": sums["turns"], "met SLO %": 100 * sums["met"] / sums["turns"],
                              "tokens/s": sums["tokens"] / sums["wall"],
                              "goodput tokens/s": sums["good_tokens"] / sums["wall"]})
        parts.append(labelled_rows(table, part).assign(task=task or "all").set_index("task", append=True))
    return pd.concat(parts).round(2)
