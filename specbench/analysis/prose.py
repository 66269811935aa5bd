"""Checked prose: every figure quoted in a results page must be found in a source it names.

The rule and the annotations are documented for users in docs/measuring.md ("Checked prose"). In short: a *figure*
is a number with a decimal point (`1.35`, `59.24`) or a number with a unit of measurement (`×`, `x`, `%`, `ms`, `s`,
`min`, `minute(s)`, `second(s)`, `hour(s)`, `GB`, `MB`, `tokens/s`), in prose or in a code block's output lines and
comments; not in commands, code spans, link targets or HTML comments, and not a setting (`T=1`), a version
(`2.13.0`, `torch 2.13`) or the confidence level 95%. A *source annotation* is an HTML comment:

    <!-- src: T0/speedup_T0.md run-T0/run.json -->      the block it stands in or precedes
    <!-- src-section: ../reports/retired/reference/speedup_T0.md -->   every block up to the next heading
    <!-- const: 3.2 -->                                  numbers of the block that are names or settings

Paths are relative to the page's folder. Each figure must equal, at its written precision, a number of one of its
block's sources: a table cell (.md, .csv, .tex), a number of a text output (.txt, .log) or a record field (.json,
.jsonl); a `×` figure a ratio there where the source writes any, a `%` figure also a fraction, an `ms` figure also
seconds. A figure after a method name that is a row of a source table (the last such name before it) must be in
that row of that source; other figures are matched by value anywhere in their sources, so a block's sources should
be few.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from specbench.errors import SpecbenchError

UNITS = r"×|x\b|%|ms\b|s\b|min\b|minutes?\b|hours?\b|seconds?\b|GB\b|MB\b|tokens/s\b"
FIGURE = re.compile(rf"(?<![\w.=/@])(?<![A-Za-z_]-)(\d+(?:\.\d+)?)(?![\d.]\d)(\s?(?:{UNITS}))?")
NOT_FIGURES = re.compile(r"\b(?:Python|torch|transformers|CUDA|version|v)\s?\d+\.\d+(?:\.\d+)*\+?|\d+\.\d+\.\d+|\b95%",
                         re.I)
HIDDEN = re.compile(r"`[^`]*`|<!--.*?-->|\]\([^)]*\)|https?://\S+")
ANNOTATION = re.compile(r"<!--\s*((?:src|const|src-section):.*?)-->")
COMMAND = re.compile(r"\s*(?:\$ )?(?:python3?|bash|sh|specbench|pip|git|cd|export|nice|sed|cat|ls|\.?/|--|"
                     r"[A-Z][A-Z0-9_]*=\S*\s)")
CODE_LANGUAGES = {"python", "py", "yaml", "json", "toml", "tex", "latex"}
RATIO = re.compile(r"(-?\d+(?:\.\d+)?)\s?(?:×|x\b)")
LABEL = re.compile(r"[\s*('\"]*([A-Za-z][\w-]*)")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Figure:
    """One quoted figure: its text, its value and precision, and its unit (empty when it has a decimal point only)."""

    line: int
    text: str
    value: float
    decimals: int
    unit: str
    before: str  # the block's text before it: the last row label there is the row it quotes


@dataclass(frozen=True)
class Block:
    """Consecutive non-blank lines of a page, the figures in them, and the sources its annotations name."""

    first_line: int
    figures: tuple[Figure, ...]
    sources: tuple[Path, ...]
    consts: frozenset[float]


def visible_text(line: str) -> str:
    """A line without what holds no figures: code spans, comments, link targets, versions."""
    return NOT_FIGURES.sub(" ", HIDDEN.sub(" ", line))


def figures_in(line: str, number: int, before: str = "") -> list[Figure]:
    """The figures of one line of prose (the rule in this module's docstring); `before`: the block's text before it."""
    visible = visible_text(line)
    found = []
    for match in FIGURE.finditer(visible):
        digits, unit = match.group(1), (match.group(2) or "").strip()
        if "." not in digits and not unit:
            continue
        decimals = len(digits.split(".")[1]) if "." in digits else 0
        found.append(Figure(number, match.group(0).strip(), float(digits), decimals, unit,
                            before + visible[:match.start()]))
    return found


def parse_annotation(text: str, folder: Path) -> tuple[list[Path], set[float]]:
    """`src: A B; const: 3.2` -> the source paths (relative to the page's folder) and the constant numbers."""
    sources, consts = [], set()
    for part in text.split(";"):
        key, _, rest = part.partition(":")
        target = consts if key.strip() == "const" else None
        for word in rest.split():
            if target is not None:
                try:
                    target.add(float(word))
                except ValueError:
                    raise SpecbenchError(f"{folder}: `const:` lists numbers, not {word!r}") from None
            else:
                sources.append(folder / word)
    return sources, consts


def prose_of_code(line: str, language: str, continued: bool) -> str:
    """The part of a code line that is prose: a command's comment, or an output line as it is."""
    comment = line if line.lstrip().startswith("#") else line.partition(" # ")[2]
    if language in CODE_LANGUAGES or continued or COMMAND.match(line):
        return comment
    return line


def blocks_of(page: Path) -> list[Block]:
    """The page's blocks with their figures and sources. A fenced or indented code block is one block whose commands
    are not prose but whose comments and output lines are; an annotation just before a block belongs to it."""
    blocks: list[Block] = []
    figures: list[Figure] = []
    sources: list[Path] = []
    consts: set[float] = set()
    first = 0
    fence: str | None = None  # the open fence's language ("" for none)
    indented = continued = False
    section: list[Path] = []  # the current section's sources (src-section), up to the next heading

    seen: list[str] = []  # the block's visible text so far

    def close() -> None:
        if figures or sources:
            blocks.append(Block(first, tuple(figures), tuple(sources + section), frozenset(consts)))
        figures.clear(), sources.clear(), consts.clear(), seen.clear()

    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fence = None if fence is not None else line.lstrip()[3:].strip().lower()
            continued = False
            continue
        if not line.strip() and fence is None:
            close()
            continue
        if not figures and not sources and fence is None:
            first = number
            indented = line.startswith(("    ", "\t"))
        if fence is not None or indented:
            text = prose_of_code(line, fence or "", continued)
            continued = line.rstrip().endswith("\\")
        else:
            text = line
            if line.startswith("#"):
                close()
                section.clear()
            for annotation in ANNOTATION.finditer(line):
                paths, names = parse_annotation(annotation.group(1), page.parent)
                (section if annotation.group(1).startswith("src-section") else sources).extend(paths)
                consts.update(names)
        row = text.lstrip().startswith("|")  # a table row: its own label, not an earlier row's
        figures.extend(figures_in(text, number, "" if row else " ".join([*seen, ""])))
        seen.append(visible_text(text))
    close()
    return blocks


@dataclass(frozen=True)
class Numbers:
    """Numbers of a source (or of one of its rows), and those of them written as ratios (`1.35×`, `1.601x`)."""

    values: tuple[float, ...]
    ratios: tuple[float, ...]

    @classmethod
    def of_text(cls, text: str) -> Numbers:
        text = text.replace("−", "-")
        return cls(tuple(float(n) for n in NUMBER.findall(text)), tuple(float(n) for n in RATIO.findall(text)))

    def holds(self, figure: Figure) -> bool:
        """A ratio figure (× or x) must be a ratio here where any number is written as one; others any number."""
        pool = self.ratios if figure.unit in ("×", "x") and self.ratios else self.values
        return any(matches(figure, number) for number in pool)


@dataclass(frozen=True)
class SourceNumbers:
    """A source's numbers, all of them and per table row (a row's label: its first cell's method name)."""

    everything: Numbers
    rows: dict[str, Numbers]

    def holds(self, figure: Figure, subject: str | None) -> bool:
        """The figure is in the row it quotes (`subject`) where this source has that row, else anywhere in it."""
        return (self.rows[subject] if subject in self.rows else self.everything).holds(figure)


def row_label(cell: str) -> str | None:
    """A table row's label: the method name its first cell starts with (`eagle@head=...` and `('eagle', 0.0)` give
    `eagle`)."""
    match = LABEL.match(cell)
    return match.group(1) if match else None


def numbers_of(path: Path) -> SourceNumbers:
    """Every number a source holds (each field of a JSON record, each number of a table or text file), and each
    table row's (Markdown `| label | ... |` rows, CSV lines)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix in (".json", ".jsonl"):
        lines = [text] if path.suffix == ".json" else text.splitlines()
        values: list[float] = []
        for chunk in lines:
            if chunk.strip():
                values.extend(json_numbers(json.loads(chunk)))
        return SourceNumbers(Numbers(tuple(values), ()), {})
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        first, sep, rest = line.strip().strip("|").partition("|" if line.lstrip().startswith("|") else ",")
        label = row_label(first) if sep and (line.lstrip().startswith("|") or path.suffix == ".csv") else None
        if label:
            rows.setdefault(label, []).append(rest)
    return SourceNumbers(Numbers.of_text(text), {label: Numbers.of_text(" ".join(r)) for label, r in rows.items()})


def last_label(text: str, labels: list[str]) -> str | None:
    """The row label named last in `text` (a whole word: `samd` is not in `samd-eagle`), or None."""
    best, where = None, -1
    for label in labels:
        for match in re.finditer(rf"(?<![\w-]){re.escape(label)}(?![\w-])", text):
            if match.start() > where:
                best, where = label, match.start()
    return best


def json_numbers(value: object) -> list[float]:
    """The numbers in a parsed JSON value, at any depth (numbers written as strings included)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [n for item in value.values() for n in json_numbers(item)]
    if isinstance(value, list):
        return [n for item in value for n in json_numbers(item)]
    if isinstance(value, str):
        return [float(n) for n in NUMBER.findall(value)]
    return []


def matches(figure: Figure, number: float) -> bool:
    """The figure is `number` written at the figure's precision (or a fraction as %, seconds as ms)."""
    half = 0.5 * 10 ** -figure.decimals + 1e-9
    candidates = [abs(number)]
    if figure.unit == "%":
        candidates.append(abs(number) * 100)
    if figure.unit == "ms":
        candidates.append(abs(number) * 1000)
    return any(abs(c - figure.value) <= half for c in candidates)


def check_page(page: Path) -> list[str]:
    """One line per figure of the page that no named source holds (or whose source is missing)."""
    errors = []
    cache: dict[Path, SourceNumbers] = {}
    for block in blocks_of(page):
        labels: list[str] = []
        for source in block.sources:
            if source not in cache:
                if not source.is_file():
                    errors.append(f"{page}:{block.first_line}: source {source} does not exist")
                    cache[source] = SourceNumbers(Numbers((), ()), {})
                else:
                    cache[source] = numbers_of(source)
            labels.extend(cache[source].rows)
        for figure in block.figures:
            if figure.value in block.consts:
                continue
            if not block.sources:
                errors.append(f"{page}:{figure.line}: {figure.text!r} has no source (a `<!-- src: FILE -->` for "
                              "its block)")
            elif not any(cache[source].holds(figure, last_label(figure.before, labels)) for source in block.sources):
                names = " ".join(str(s) for s in block.sources)
                errors.append(f"{page}:{figure.line}: {figure.text!r} is in none of its sources: {names}")
    return errors


def results_pages(root: Path) -> list[Path]:
    """A checkout's pages whose figures are checked: README.md, docs/results.md and every report's README.md, at any
    depth (not those inside reports/retired/'s folders: their tables kept no records)."""
    reports = [page for page in root.glob("reports/**/README.md") if page.parent.parent.name != "retired"]
    pages = [root / "README.md", root / "docs" / "results.md", *sorted(reports)]
    return [page for page in pages if page.is_file()]


def check_prose_command(path: Path) -> int:
    """`report --check-prose PATH`: a page, or a checkout's results pages; one line per error, exit 1 on any."""
    if not path.exists():
        raise SpecbenchError(f"report --check-prose: {path} does not exist")
    pages = results_pages(path) if path.is_dir() else [path]
    if not pages:
        raise SpecbenchError(f"report --check-prose: no README.md, docs/results.md or reports/**/README.md in {path}")
    errors = [error for page in pages for error in check_page(page)]
    for error in errors:
        print(error)
    checked = sum(len(block.figures) for page in pages for block in blocks_of(page))
    print(f"{len(pages)} pages, {checked} figures, {len(errors)} without a source")
    return 1 if errors else 0
