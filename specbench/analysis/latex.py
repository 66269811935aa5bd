"""A report table as LaTeX for a paper: booktabs rules, a two-level header (task, then Speedup / τ), the tasks'
display names, methods by name, a float of its own (table* when it is wide) with a short caption and a label.
Intervals: their distances up and down from the value (super- and subscript), in the last column group (the mean
over tasks, or a leaderboard's) when the table has several groups, so that 14 columns fit a two-column page's width
(452 pt at 8 pt type, under ACL's 455 pt); every cell's interval is in the Markdown and CSV forms."""
from __future__ import annotations

import re

import pandas as pd

from specbench.analysis.tables import bound, display_names, format_table, short_labels

PREAMBLE = r"% Needs \usepackage{booktabs} in the preamble (for its rules: top, mid, cmid, bottom)."
WIDE = 6  # more numeric columns than this: table* (both columns of a two-column page)
SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
           "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
SYMBOLS = {"×": r"$\times$", "τ": r"$\tau$", "±": r"$\pm$", "—": "---", "–": "--", "…": r"\ldots{}"}


def escape(text: str) -> str:
    """Text for LaTeX: its special characters escaped, the report's symbols (×, τ, ±) in math mode."""
    out = "".join(SPECIAL.get(ch, ch) for ch in text)
    for symbol, latex in SYMBOLS.items():
        out = out.replace(symbol, latex)
    return out


COUNT = re.compile(r"\s*\(n=(\d+)\)")  # the questions behind a cell, where they are not the baseline's
CELL = re.compile(r"(?P<value>\S+)(?: \[(?P<low>[-\d.e]+), (?P<high>[-\d.e]+)\])?(?P<rest>.*)")


def _cell(text: str) -> str:
    r"""A formatted cell (maybe **bold**) as LaTeX, its 95% interval [low, high] as the distances to its ends, up and
    down: 1.35$\times$$^{+0.12}_{-0.10}$ (as narrow as a ± subscript); a "(n=N)" after it in small type under it
    (a wide table stays within the page); anything else after it as it is."""
    bold = text.startswith("**") and text.endswith("**")
    parts = CELL.fullmatch(text.strip("*"))
    value = parts["value"]
    cell = escape(value)
    if parts["low"]:
        number = float(value.rstrip("×"))
        cell += rf"$^{{+{bound(float(parts['high']) - number)}}}_{{-{bound(number - float(parts['low']))}}}$"
    count = COUNT.fullmatch(parts["rest"])
    if count:
        cell = rf"\shortstack{{{cell}\\{{\tiny n={count[1]}}}}}"
    else:
        cell += escape(parts["rest"])
    return r"\textbf{" + cell + "}" if bold else cell


def _task_header(name: str, longer: bool = False) -> str:
    """A name in the header; two words on two lines (Natural Questions), to keep the columns narrow (longer: more
    words too, the first half on the first line: "% of / copy")."""
    words = name.split(" ")
    if len(words) < 2 or len(words) > 2 and not longer:
        return escape(name)
    half = (len(words) + 1) // 2
    return rf"\shortstack{{{escape(' '.join(words[:half]))}\\{escape(' '.join(words[half:]))}}}"


def header_rows(columns: pd.MultiIndex, narrow: bool = False) -> list[str]:
    """Task names over their statistics, with a rule under each task (narrow: "Speed-up" on two lines)."""
    names = display_names()
    groups = list(dict.fromkeys(task for task, _ in columns))
    top, rules, first = [""], [], 2
    for task in groups:
        width = sum(1 for t, _ in columns if t == task)
        label = _task_header(names.get(task, task))
        top.append(rf"\multicolumn{{{width}}}{{c}}{{{label}}}" if width > 1 else label)
        rules.append(rf"\cmidrule(lr){{{first}-{first + width - 1}}}")
        first += width
    stats = ["Method"] + [r"\shortstack{Speed-\\up}" if narrow and stat == "Speedup" else escape(stat)
                          for _, stat in columns]
    if len(groups) == 1:  # a leaderboard: the caption names its one group
        return [" & ".join(stats) + r" \\"]
    return [" & ".join(top) + r" \\", "".join(rules), " & ".join(stats) + r" \\"]


def to_latex(table: pd.DataFrame, caption: str, half_width: pd.DataFrame | None = None, label: str = "",
             counts: pd.DataFrame | None = None) -> str:
    """The table as a LaTeX float (see the module's docstring); `caption` is plain text; `counts` as in
    format_table."""
    groups = list(dict.fromkeys(task for task, _ in table.columns))
    last = {c for c in table.columns if c[0] == groups[-1]} if len(groups) > 1 else None
    text = format_table(table, half_width=half_width, interval_columns=last, counts=counts)
    names = short_labels(list(text.index), base_only=True)
    body = [" & ".join([escape(names[method])] + [_cell(str(v)) for v in row]) + r" \\"
            for method, row in text.iterrows()]
    wide = table.shape[1] > WIDE
    float_name = "table*" if wide else "table"
    lines = [PREAMBLE, rf"\begin{{{float_name}}}[t]", r"\centering", r"\footnotesize" if wide else r"\small",
             r"\setlength{\tabcolsep}{2.5pt}" if wide else "", rf"\caption{{{escape(caption)}}}",
             rf"\label{{{label}}}" if label else "", r"\begin{tabular}{l" + "c" * table.shape[1] + "}", r"\toprule",
             *header_rows(table.columns, narrow=wide), r"\midrule", *body, r"\bottomrule", r"\end{tabular}",
             rf"\end{{{float_name}}}"]
    return "\n".join(line for line in lines if line) + "\n"


def flat_latex(text: pd.DataFrame, caption: str, label: str = "") -> str:
    """A frame of formatted cells (one header row, its names of several words on two lines; no bold; the first
    column left-aligned; columns 4 pt apart, not 6) as a LaTeX float, narrow enough for the efficiency table's seven
    columns."""
    body = [" & ".join(escape(str(v)) for v in row) + r" \\" for row in text.itertuples(index=False)]
    lines = [PREAMBLE, r"\begin{table}[t]", r"\centering", r"\small", r"\setlength{\tabcolsep}{4pt}",
             rf"\caption{{{escape(caption)}}}",
             rf"\label{{{label}}}" if label else "", r"\begin{tabular}{l" + "r" * (text.shape[1] - 1) + "}",
             r"\toprule", " & ".join(_task_header(str(c), longer=True) for c in text.columns) + r" \\", r"\midrule", *body,
             r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(line for line in lines if line) + "\n"
