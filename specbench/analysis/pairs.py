"""The one pairing behind every ratio against a baseline (vanilla, or a reference row such as hf-compiled): a
method's answer beside the baseline's answer to the same question. A run cut short (a time limit, Ctrl-C, a crash)
leaves methods with different sets of questions; tokens/s over different questions is no ratio."""
from __future__ import annotations

import pandas as pd

PAIR_KEYS = ["task", "question_id", "repeat", "turns"]  # a question both rows finished, every turn of it


def paired_with(frame: pd.DataFrame, baseline: str = "vanilla") -> pd.DataFrame:
    """Each row of `frame` beside `baseline`'s answer to the same question (task, question, repeat, turns; a frame
    without repeats or turns: task and question), whose
    new_tokens and wall_time come as new_tokens_base and wall_time_base; rows the baseline did not finish are
    dropped. Every ratio against a baseline is computed over these pairs only (a run cut short after some questions
    must not compare a method's tokens/s with the baseline's over other questions)."""
    keys = [k for k in PAIR_KEYS if k in frame.columns or k in ("task", "question_id")]  # repeat, turns: if there
    base = frame.loc[frame["method"] == baseline, [*keys, "new_tokens", "wall_time"]]
    return frame.merge(base, on=keys, suffixes=("", "_base"))
