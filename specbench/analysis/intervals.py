"""95% intervals for the report's ratios, on the log scale: a cell v with log half-width h has the interval
[v·e^-h, v·e^h] (interval_bounds), which stays above zero however few the questions; τ's lower end is also kept at
1 (a step emits at least its bonus token), and its upper end at the longest step the method's records hold (a mean
over steps cannot pass its longest one: tables.longest_steps).

With a single repeat, over the questions, each method's paired with the baseline's answer to the same question (the
delta method): a table cell is a product of totals over the paired questions, each to the power ±1 (speedup =
(tokens / time) of the method ÷ the same of vanilla; τ = tokens / forwards; Spec-Bench-style speedup = mean tokens/s
÷ vanilla's), so log(cell) moves with u_i = Σ_j ±v_ij / V_j, question i's share of each total. Its variance is
estimated as n/(n-1) Σ u_i², and h = t(0.975, n-1) × √variance. The mean over tasks adds the tasks' variances
(tasks are disjoint questions) with Welch-Satterthwaite degrees of freedom, h = its half-width ÷ the mean.
With several repeats (specbench.analysis.tables.table_with_interval): h = t(0.975, N-1) × the standard deviation of
log(cell) over the N repeats ÷ √N.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from specbench.analysis.pairs import paired_with

LOWER_BOUNDS = {"τ": 1.0}  # a statistic's least possible value above zero (a speedup's is zero itself)


def interval_bounds(value: float, log_half_width: float, stat: str,
                    upper: float | None = None) -> tuple[float, float]:
    """The 95% interval of a cell: [v·e^-h, v·e^h], its lower end at least the statistic's bound, its upper end at
    most `upper` (τ: the longest step of the method) where given."""
    low, high = value * math.exp(-log_half_width), value * math.exp(log_half_width)
    return max(low, LOWER_BOUNDS.get(stat, 0.0)), high if upper is None else min(high, max(upper, value))


def _log_variance(parts: list[tuple[np.ndarray, int]]) -> tuple[float, int]:
    """The variance of log(Π total_j^power_j) over n paired questions, and n."""
    n = len(parts[0][0])
    if n < 2:
        return float("nan"), n
    u = sum(power * values / values.sum() for values, power in parts)
    return float(n / (n - 1) * np.sum((u - u.mean()) ** 2)), n


def _cell_variances(frame: pd.DataFrame, per_question_means: bool, baseline: str = "vanilla") -> pd.DataFrame:
    """Per (method, task): the variance of log speedup (over `baseline`, on the questions both finished) and of
    log τ, and the questions behind each."""
    paired = paired_with(frame, baseline)
    paired = paired.assign(rate=paired["new_tokens"] / paired["wall_time"],
                           rate_base=paired["new_tokens_base"] / paired["wall_time_base"])
    rows = []
    for (method, task), own in frame.groupby(["method", "task"], sort=False):
        tau = _log_variance([(own["new_tokens"].to_numpy(float), 1), (own["steps"].to_numpy(float), -1)])
        pairs = paired[(paired["method"] == method) & (paired["task"] == task)]
        if per_question_means:
            terms = [("rate", 1), ("rate_base", -1)]
        else:
            terms = [("new_tokens", 1), ("wall_time", -1), ("new_tokens_base", -1), ("wall_time_base", 1)]
        speedup = _log_variance([(pairs[c].to_numpy(float), power) for c, power in terms])
        rows.append({"method": method, "task": task, "Speedup": speedup[0], "Speedup n": speedup[1],
                     "τ": tau[0], "τ n": tau[1]})
    return pd.DataFrame(rows).set_index(["method", "task"])


def delta_half_widths(frame: pd.DataFrame, table: pd.DataFrame, per_question_means: bool = False,
                      baseline: str = "vanilla") -> pd.DataFrame:
    """Log half-widths of the 95% intervals of `table` (rows = method names as in `frame`, one repeat; speedups
    over `baseline`), same rows and columns; NaN where fewer than two questions pair up, and on vanilla's row and
    the baseline's (vanilla's τ is 1 by definition, and so is the baseline's speedup)."""
    cells = _cell_variances(frame, per_question_means, baseline)
    half = pd.DataFrame(np.nan, index=table.index, columns=table.columns)
    tasks = [c[0] for c in table.columns if c[1] == "Speedup" and c[0] != "Mean"]
    for method in table.index:
        for stat in ("Speedup", "τ"):
            if (stat == "τ" and method == "vanilla") or (stat == "Speedup" and method == baseline):
                continue
            sds, dofs = [], []
            for task in tasks:
                if (method, task) not in cells.index:
                    continue
                variance, n = cells.loc[(method, task), [stat, f"{stat} n"]]
                half.loc[method, (task, stat)] = student_t.ppf(0.975, n - 1) * np.sqrt(variance) if n >= 2 else np.nan
                sds.append(float(table.loc[method, (task, stat)]) * float(np.sqrt(variance)))
                dofs.append(n - 1)
            if ("Mean", stat) in table.columns and sds and not np.isnan(sds).any():
                mean = float(table.loc[method, ("Mean", stat)])
                half.loc[method, ("Mean", stat)] = _mean_half_width(np.array(sds), np.array(dofs, float)) / mean
    return half


def log_half_widths(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Over N ≥ 2 repeats' tables (same rows and columns): t(0.975, N-1) × sd(log cell) / √N per cell."""
    logs = pd.concat([np.log(table.astype(float)) for table in tables], keys=range(len(tables)))
    spread = logs.groupby(level=1, sort=False).std(ddof=1)
    return spread * student_t.ppf(0.975, len(tables) - 1) / len(tables) ** 0.5


def _mean_half_width(sds: np.ndarray, dofs: np.ndarray) -> float:
    """The half-width for the mean of independent estimates with standard errors `sds` (Welch-Satterthwaite)."""
    variance = np.sum(sds ** 2) / len(sds) ** 2
    if variance == 0:
        return 0.0
    dof = np.sum(sds ** 2) ** 2 / np.sum(sds ** 4 / dofs)
    return float(student_t.ppf(0.975, dof) * np.sqrt(variance))
