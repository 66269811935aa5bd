"""The one pairing behind every ratio against a baseline (vanilla, or a reference row such as hf-compiled): a
method's answer beside the baseline's answer to the same question. A run cut short (a time limit, Ctrl-C, a crash)
leaves methods with different sets of questions; tokens/s over different questions is no ratio."""
from __future__ import annotations

import pandas as pd

PAIR_KEYS = ["task", "question_id", "repeat", "turns"]  # a question both rows finished, every turn of it


def paired_with(frame: pd.DataFrame, baseline: str = "vanilla") -> pd.DataFrame:
    """Each row of `frame` beside `baseline`'s answer to the same question (task, question, repeat, turns; a frame
    without repeats or turns: task and question), whose new_tokens and wall_time come as new_tokens_base and
    wall_time_base; rows the baseline did not finish are dropped. Every ratio against a baseline is computed over
    these pairs only (a run cut short after some questions must not compare a method's tokens/s with the baseline's
    over other questions)."""
    keys = [k for k in PAIR_KEYS if k in frame.columns or k in ("task", "question_id")]
    base = frame.loc[frame["method"] == baseline, [*keys, "new_tokens", "wall_time"]]
    return frame.merge(base, on=keys, suffixes=("", "_base"))


def paired_speedups(frame: pd.DataFrame, per_question_means: bool = False,
                    baseline: str = "vanilla") -> tuple[pd.Series, pd.Series]:
    """Per (method, task): the speedup over `baseline` on the questions both finished (total tokens / total time of
    the method ÷ the same of the baseline; per_question_means: the ratio of the mean per-question tokens/s), and how
    many questions that is."""
    paired = paired_with(frame, baseline)
    keys = [paired["method"], paired["task"]]
    if per_question_means:
        rates = pd.DataFrame({"own": paired["new_tokens"] / paired["wall_time"],
                              "base": paired["new_tokens_base"] / paired["wall_time_base"]}).groupby(keys).mean()
        speedup = rates["own"] / rates["base"]
    else:
        sums = paired[["new_tokens", "wall_time", "new_tokens_base", "wall_time_base"]].groupby(keys).sum()
        speedup = (sums["new_tokens"] / sums["wall_time"]) / (sums["new_tokens_base"] / sums["wall_time_base"])
    return speedup.astype(float), paired.groupby(keys).size()


def finished(frame: pd.DataFrame) -> pd.Series:
    """How many questions (task, question, repeat, turns) each method finished."""
    return frame.groupby("method")[PAIR_KEYS].apply(lambda rows: len(rows.drop_duplicates()))
