"""What a table's caption says besides its title (specbench.analysis.report): what its intervals and (lossy) mean,
where methods emitted other token counts than vanilla, which methods finished fewer questions than the baseline, and
how many turns a latency table's percentiles come from."""
from __future__ import annotations

import pandas as pd

from specbench.analysis.latency import turns_per_method
from specbench.analysis.pairs import finished, paired_with


def caption_notes(part: pd.DataFrame) -> str:
    """What the intervals and (lossy) mean, where the table has them; where methods emitted other numbers of tokens
    than vanilla on the same questions at T=0 (a synthetic run's, a lossy method's), that their speedups time other
    texts."""
    repeats = part["repeat"].nunique()
    notes = [f"[low, high]: 95% Student-t interval over {repeats} repeats, on the log scale." if repeats > 1 else
             "[low, high]: 95% Student-t interval over the questions, paired with vanilla's (delta method, on the "
             "log scale)."]
    if not part["lossless"].all():
        notes.append("(lossy): does not reproduce the target's distribution.")
    differ = token_differences(part)
    if differ:
        notes.append(f"Tokens emitted on the questions vanilla answered differ from vanilla's ({differ}): those "
                     "speedups time other texts.")
    return " ".join(notes)


def token_differences(part: pd.DataFrame) -> str:
    """"pld 10 vs 32, ..." for the methods whose total new tokens on the questions paired with vanilla's differ
    from vanilla's, at T=0 (at T > 0 each method samples its own text); "" where none does."""
    if part["temperature"].iloc[0] != 0:
        return ""
    paired = paired_with(part)
    sums = paired.groupby("method", sort=False)[["new_tokens", "new_tokens_base"]].sum()
    differ = sums[sums["new_tokens"] != sums["new_tokens_base"]]
    return ", ".join(f"{m} {row.new_tokens} vs {row.new_tokens_base}" for m, row in differ.iterrows())


def fewer_questions(part: pd.DataFrame, baseline: str = "vanilla") -> str:
    """"pld 8 of 10, ..." for the methods that finished fewer questions than the baseline; "" where none did."""
    done = finished(part)
    if baseline not in done.index:
        return ""
    fewer = done[done < done[baseline]]
    return ", ".join(f"{m} {n} of {done[baseline]}" for m, n in fewer.items())


def latency_note(samples: pd.DataFrame) -> str:
    """"n = 20 turns per method", or each method's count where they differ."""
    turns = turns_per_method(samples)
    if turns.nunique() == 1:
        return f"n = {turns.iloc[0]} turns per method"
    return "n = " + ", ".join(f"{method} {n}" for method, n in turns.items()) + " turns"
