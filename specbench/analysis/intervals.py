"""95% intervals for the report's ratios when a run has a single repeat: over the questions, each method's paired with
vanilla's answer to the same question (the delta method).

A table cell is a product of totals over a task's questions, each to the power ±1 (speedup = (tokens / time) of the
method ÷ the same of vanilla; τ = tokens / forwards; Spec-Bench-style speedup = mean tokens/s ÷ vanilla's), so
log(cell) moves with u_i = Σ_j ±v_ij / V_j, question i's share of each total. Its variance is estimated as
n/(n-1) Σ u_i², and the half-width is t(0.975, n-1) × cell × √variance. The mean over tasks adds the tasks'
variances (tasks are disjoint questions) with Welch-Satterthwaite degrees of freedom. Questions answered by a method
but not by vanilla (a stopped run) are left out of the variance, not of the cell.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

KEYS = ["question_id", "repeat"]


def _log_variance(parts: list[tuple[np.ndarray, int]]) -> tuple[float, int]:
    """The variance of log(Π total_j^power_j) over n paired questions, and n."""
    n = len(parts[0][0])
    if n < 2:
        return float("nan"), n
    u = sum(power * values / values.sum() for values, power in parts)
    return float(n / (n - 1) * np.sum((u - u.mean()) ** 2)), n


def _cell_variances(frame: pd.DataFrame, per_question_means: bool, baseline: str = "vanilla") -> pd.DataFrame:
    """Per (method, task): the variance of log speedup (over `baseline`) and of log τ, and the questions behind
    each."""
    frame = frame.assign(rate=frame["new_tokens"] / frame["wall_time"])
    vanilla = frame[frame["method"] == baseline]
    rows = []
    for (method, task), own in frame.groupby(["method", "task"], sort=False):
        tau = _log_variance([(own["new_tokens"].to_numpy(float), 1), (own["steps"].to_numpy(float), -1)])
        base = vanilla[vanilla["task"] == task]
        paired = own.merge(base, on=KEYS, suffixes=("", "_base"))
        if per_question_means:
            terms = [("rate", 1), ("rate_base", -1)]
        else:
            terms = [("new_tokens", 1), ("wall_time", -1), ("new_tokens_base", -1), ("wall_time_base", 1)]
        speedup = _log_variance([(paired[c].to_numpy(float), power) for c, power in terms])
        rows.append({"method": method, "task": task, "Speedup": speedup[0], "Speedup n": speedup[1],
                     "τ": tau[0], "τ n": tau[1]})
    return pd.DataFrame(rows).set_index(["method", "task"])


def delta_half_widths(frame: pd.DataFrame, table: pd.DataFrame, per_question_means: bool = False,
                      baseline: str = "vanilla") -> pd.DataFrame:
    """Half-widths of the 95% intervals of `table` (rows = method names as in `frame`, one repeat; speedups over
    `baseline`), same rows and columns; NaN where fewer than two questions pair up, and on vanilla's row and the
    baseline's (vanilla's τ is 1 by definition, and so is the baseline's speedup)."""
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
                sd = float(table.loc[method, (task, stat)]) * float(np.sqrt(variance))
                half.loc[method, (task, stat)] = student_t.ppf(0.975, n - 1) * sd if n >= 2 else np.nan
                sds.append(sd)
                dofs.append(n - 1)
            if ("Mean", stat) in table.columns and sds and not np.isnan(sds).any():
                half.loc[method, ("Mean", stat)] = _mean_half_width(np.array(sds), np.array(dofs, float))
    return half


def _mean_half_width(sds: np.ndarray, dofs: np.ndarray) -> float:
    """The half-width for the mean of independent estimates with standard errors `sds` (Welch-Satterthwaite)."""
    variance = np.sum(sds ** 2) / len(sds) ** 2
    if variance == 0:
        return 0.0
    dof = np.sum(sds ** 2) ** 2 / np.sum(sds ** 4 / dofs)
    return float(student_t.ppf(0.975, dof) * np.sqrt(variance))
