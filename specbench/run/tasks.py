"""Task definitions (tasks/*.yaml, or a user's YAML via --task-file) and their questions.

Questions come from a question-file directory in the EAGLE/Spec-Bench format, from one or more question files whose
`category` field makes the tasks (--question-file, as Spec-Bench ships its benchmark), from an HF dataset through
the task's field mapping, or from the task's embedded sample. Built-in tasks belong to a suite: `eagle` (the EAGLE
paper's six, the default), `spec-bench` (Spec-Bench's six over its one question file), `speed-bench` (SPEED-Bench's
qualitative split, one task per category) or `speed-bench-throughput` (its throughput split, one task per input
length)."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

import yaml

from specbench.errors import SpecbenchError
from specbench.method import closest
from specbench.run.questions import (
    Question,
    question_from_raw,
    questions_from_rows,
    read_question_file,
    without_placeholders,
)

SOURCES = ("auto", "embedded", "files", "hf")
DEFAULT_SUITE = "eagle"
FILE_TASK_MAX_NEW_TOKENS = 1024  # a category of a question file with no definition of its own: Spec-Bench's default


@dataclass
class Task:
    name: str
    display_name: str = ""  # how tables and plots name it (MT-bench, CNN/DM); empty: the name
    description: str = ""
    question_file: str = ""  # relative to --question-dir (or, for a --task-file, to the YAML's folder)
    max_new_tokens: int = 256
    order: int = 0  # position in tables (the suite's column order)
    suite: str = DEFAULT_SUITE
    categories: list[str] = field(default_factory=list)  # keep only these categories of the question file
    hf: dict[str, Any] = field(default_factory=dict)
    embedded: list[dict[str, Any]] = field(default_factory=list)
    placeholder: str = ""  # a first turn starting with this is no prompt (a row published without its text): skipped
    origin: str | None = None  # the YAML file of a user-defined task


@dataclass
class QuestionSelection:
    """Which tasks and questions a command decodes (the question arguments of run, bench and check)."""
    tasks: list[str] = field(default_factory=lambda: ["all"])
    suite: str | None = None  # None: eagle, or with --question-file the file's categories as they are
    question_files: list[Path] = field(default_factory=list)
    category_map: dict[str, list[str]] = field(default_factory=dict)  # task name -> categories it groups
    task_files: list[Path] = field(default_factory=list)
    source: str = "auto"
    question_dir: Path | None = None
    limit: int | None = None  # the first N questions of each task, in file order (after begin/end)
    begin: int | None = None  # Spec-Bench's --question-begin/--question-end: a slice of the question file's lines
    end: int | None = None
    tail: int | None = None  # the last N questions of each task instead: the development split `tune` decodes

    def settings(self) -> dict[str, Any]:
        """As run.json keeps it (selection_from_settings reads it back): paths absolute, so that a resume selects
        the same questions whatever its working directory."""
        return {
            "tasks": list(self.tasks), "suite": self.suite,
            "question_files": [str(Path(p).resolve()) for p in self.question_files],
            "category_map": dict(self.category_map), "task_files": [str(Path(p).resolve()) for p in self.task_files],
            "question_begin": self.begin, "question_end": self.end, "limit": self.limit, "source": self.source,
            "question_dir": str(self.question_dir.resolve()) if self.question_dir is not None else None,
        } | ({"tail": self.tail} if self.tail else {})  # runs from before `tune` resume unchanged


def _task_from_spec(spec: Any, where: str, origin: str | None = None) -> Task:
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"].strip():
        raise SpecbenchError(f"{where}: a task definition is a YAML mapping with a 'name'")
    known = {f.name for f in fields(Task)} - {"origin"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise SpecbenchError(f"{where}: unknown key {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
    task = Task(**spec, origin=origin)
    if not isinstance(task.max_new_tokens, int) or task.max_new_tokens <= 0:
        raise SpecbenchError(f"{where}: max_new_tokens must be a positive integer")
    if not isinstance(task.categories, list) or not all(isinstance(c, str) for c in task.categories):
        raise SpecbenchError(f"{where}: categories must be a list of names")
    return task


def builtin_tasks() -> list[Task]:
    """Every tasks/*.yaml: one task definition, or a list of them (a suite's tasks that share their source)."""
    found = []
    for entry in sorted(resources.files("specbench.builtin_tasks").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            spec = yaml.safe_load(entry.read_text(encoding="utf-8"))
            specs = spec if isinstance(spec, list) else [spec]
            found.extend(_task_from_spec(one, f"tasks/{entry.name}") for one in specs)
    return found


def suites() -> dict[str, list[Task]]:
    grouped: dict[str, list[Task]] = {}
    for task in builtin_tasks():
        grouped.setdefault(task.suite, []).append(task)
    return {name: sorted(tasks, key=lambda t: t.order) for name, tasks in grouped.items()}


def available_tasks(suite: str = DEFAULT_SUITE) -> dict[str, Task]:
    known = suites()
    if suite not in known:
        raise SpecbenchError(f"unknown suite {suite!r}; valid: {', '.join(known)}")
    return {t.name: t for t in known[suite]}


def read_task_file(path: Path) -> Task:
    if not path.is_file():
        raise SpecbenchError(f"--task-file {path}: no such file")
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SpecbenchError(f"--task-file {path}: invalid YAML ({str(exc).splitlines()[0]})") from None
    task = _task_from_spec(spec, f"--task-file {path}", origin=str(path.resolve()))
    if not task.question_file and not task.embedded and not task.hf:
        raise SpecbenchError(f"--task-file {path}: give question_file, embedded questions or an hf mapping")
    return task


def select_tasks(names: list[str], suite: str = DEFAULT_SUITE, task_files: Iterable[Path] = ()) -> list[Task]:
    """The suite's tasks plus user-defined ones, selected by name (`all`: every one of them)."""
    known = available_tasks(suite)
    for path in task_files:
        task = read_task_file(path)
        if task.name in known:
            raise SpecbenchError(f"--task-file {path}: a task named {task.name!r} exists already; rename it")
        known[task.name] = task
    if names == ["all"]:
        return list(known.values())
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SpecbenchError(f"unknown task {', '.join(unknown)}; valid: all, {', '.join(known)}"
                             f"{closest(unknown[0], list(known))}")
    return [known[n] for n in names]


def load_hf_questions(task: Task, limit: int | None, path: str | None = None) -> list[Question]:
    """Questions from the task's HF dataset (or `path`, a local dataset folder with the same fields)."""
    mapping = task.hf
    if not mapping:
        raise SpecbenchError(f"task {task.name} has no HF dataset mapping")
    split = mapping["split"] if limit is None else f"{mapping['split']}[:{limit}]"
    name = path or mapping["path"] + (f" (config {mapping['name']})" if mapping.get("name") else "")
    files = "give its questions as files" + (f": --question-dir DIR with DIR/{task.question_file}"
                                             if task.question_file else "")
    try:
        import datasets
    except ImportError:
        raise SpecbenchError(f"task {task.name} reads the HF dataset {name}, which needs the datasets package: "
                             f"pip install datasets; or {files}") from None
    try:
        rows = datasets.load_dataset(path or mapping["path"], mapping.get("name"), split=split)
    except Exception as exc:  # datasets raises many types for offline / missing data
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecbenchError(f"cannot load HF dataset {name} for task {task.name}: {first}; without the network, "
                             f"{files}") from None
    return questions_from_rows(rows, mapping, task.name)


def _task_question_path(task: Task, question_dir: Path | None) -> Path:
    if question_dir is not None:
        return question_dir / task.question_file
    if task.origin is not None:
        return Path(task.origin).parent / task.question_file
    raise SpecbenchError("--source files needs --question-dir")


def _slice(questions: list[Question], begin: int | None, end: int | None) -> list[Question]:
    return questions[begin:end] if begin is not None or end is not None else questions


def load_questions(task: Task, source: str, question_dir: Path | None, limit: int | None,
                   begin: int | None = None, end: int | None = None) -> list[Question]:
    """One task's questions: its file's lines [begin:end] (the task's categories only), then the first `limit`."""
    if source == "auto":
        has_file = bool(task.question_file) and (question_dir is not None or task.origin is not None)
        source = "files" if has_file else ("embedded" if task.embedded else "hf")
    if source == "files":
        if not task.question_file:
            raise SpecbenchError(f"task {task.name} names no question_file")
        questions = _slice(read_question_file(_task_question_path(task, question_dir)), begin, end)
        if task.categories:
            questions = [q for q in questions if q.category in task.categories]
    elif source == "hf":  # a task that takes some categories of the dataset takes them before the first `limit`
        rows_limit = None if begin or end or task.categories or task.placeholder else limit
        questions = _slice(load_hf_questions(task, rows_limit), begin, end)
        if task.categories:
            questions = [q for q in questions if q.category in task.categories]
    elif source == "embedded":
        questions = [question_from_raw(raw, f"task {task.name} embedded[{i}]") for i, raw in enumerate(task.embedded)]
        questions = _slice(questions, begin, end)
    else:
        raise SpecbenchError(f"unknown question source {source!r}; valid: {', '.join(SOURCES)}")
    questions = _skip_placeholders(questions, {task.placeholder}, f"task {task.name}")
    return questions[:limit] if limit else questions


def _skip_placeholders(questions: list[Question], placeholders: set[str], where: str) -> list[Question]:
    """Rows published without their prompt are left out, and the user told how many and how to get them."""
    kept = without_placeholders(questions, placeholders)
    if len(kept) < len(questions):
        print(f"specbench: note: {where}: {len(questions) - len(kept)} of {len(questions)} questions skipped: the "
              "dataset publishes them with a placeholder in place of the prompt; docs/speed-bench.md says how to "
              "make the full files for --question-dir", file=sys.stderr)
    return kept


def _tasks_of_question_files(sel: QuestionSelection) -> list[tuple[Task, list[Question]]]:
    """--question-file: every category becomes a task, except those a category map or the suite groups."""
    rows: list[Question] = []
    for path in sel.question_files:
        rows.extend(read_question_file(path, need_category=True))
    definitions = {t.name: t for t in (suites()[sel.suite] if sel.suite else [])}
    placeholders = {t.placeholder for t in definitions.values() if t.placeholder}
    rows = _skip_placeholders(rows, placeholders, ", ".join(map(str, sel.question_files)))
    if len({str(q.question_id) for q in rows}) != len(rows):
        raise SpecbenchError("--question-file: the same question_id appears twice across the files")
    present = list(dict.fromkeys(q.category for q in rows))
    where = ", ".join(map(str, sel.question_files))
    for path in sel.task_files:
        task = read_task_file(path)
        definitions[task.name] = task
    for name, categories in sel.category_map.items():
        absent = [c for c in categories if c not in present]
        if absent:
            raise SpecbenchError(f"--category-map {name}: no category {', '.join(absent)} in {where} "
                                 f"(it has {', '.join(present)})")
    groups = {name: task.categories or [name] for name, task in definitions.items()}
    groups.update(sel.category_map)
    wanted = set(sel.tasks) - {"all"}
    for name in wanted & set(groups):
        if not set(groups[name]) & set(present):
            raise SpecbenchError(f"task {name}: no category {', '.join(groups[name])} in {where} "
                                 f"(it has {', '.join(present)})")
    groups = {name: cats for name, cats in groups.items() if set(cats) & set(present)}  # a suite's absent tasks
    grouped = {c for cats in groups.values() for c in cats}
    doubled = sorted(c for c in grouped if sum(c in cats for cats in groups.values()) > 1)
    if doubled:
        raise SpecbenchError(f"category {', '.join(doubled)} is mapped to more than one task")
    for category in present:
        if category not in grouped:
            groups[category] = [category]
    tasks = []
    for order, (name, categories) in enumerate(sorted(groups.items(), key=lambda kv: min(
            present.index(c) for c in kv[1] if c in present))):
        base = definitions.get(name)
        tasks.append(Task(
            name=name, description=base.description if base else f"categories {', '.join(categories)} of {where}",
            question_file="", max_new_tokens=base.max_new_tokens if base else FILE_TASK_MAX_NEW_TOKENS,
            order=order, suite=sel.suite or "question-file", categories=categories))
    if sel.tasks != ["all"]:
        names = {t.name: t for t in tasks}
        unknown = [n for n in sel.tasks if n not in names]
        if unknown:
            raise SpecbenchError(f"unknown task {', '.join(unknown)}: {where} gives the tasks all, {', '.join(names)}"
                                 f"{closest(unknown[0], list(names))}")
        tasks = [names[n] for n in sel.tasks]
    sliced = _slice(rows, sel.begin, sel.end)
    selected = []
    for task in tasks:
        questions = [q for q in sliced if q.category in task.categories]
        if questions:
            selected.append((task, questions[: sel.limit] if sel.limit else questions))
    return selected


def resolve_questions(sel: QuestionSelection) -> list[tuple[Task, list[Question]]]:
    """Every selected task with its questions; bad input is one SpecbenchError naming what is wrong."""
    if sel.limit is not None and sel.limit <= 0:
        raise SpecbenchError(f"--limit must be > 0, got {sel.limit}")
    if sel.tail is not None and sel.tail <= 0:
        raise SpecbenchError(f"--dev-questions must be > 0, got {sel.tail}")
    if sel.limit is not None and sel.tail is not None:
        raise SpecbenchError("--limit (the first questions) and --dev-questions (the last ones) exclude each other")
    if sel.begin is not None and sel.begin < 0 or sel.end is not None and sel.end < 0:
        raise SpecbenchError("--question-begin and --question-end must be >= 0")
    if sel.begin is not None and sel.end is not None and sel.begin > sel.end:
        raise SpecbenchError(f"--question-begin {sel.begin} is after --question-end {sel.end}")
    if sel.question_dir is not None and not sel.question_dir.is_dir():
        raise SpecbenchError(f"--question-dir {sel.question_dir}: no such directory")
    if sel.suite is not None and sel.suite not in suites():
        raise SpecbenchError(f"unknown suite {sel.suite!r}; valid: {', '.join(suites())}")
    if sel.category_map and not sel.question_files:
        raise SpecbenchError("--category-map goes with --question-file")
    if sel.question_files:
        if sel.source not in ("auto", "files"):
            raise SpecbenchError(f"--question-file reads files; it does not go with --source {sel.source}")
        selected = _tasks_of_question_files(sel)
    else:
        tasks = select_tasks(sel.tasks, sel.suite or DEFAULT_SUITE, sel.task_files)
        selected = [(t, load_questions(t, sel.source, sel.question_dir, sel.limit, sel.begin, sel.end)) for t in tasks]
        selected = [(t, qs) for t, qs in selected if qs]
    if not selected:
        raise SpecbenchError("no questions selected (check --tasks and --question-begin/--question-end)")
    return [(t, qs[-sel.tail:]) for t, qs in selected] if sel.tail else selected


def parse_category_map(entries: list[str]) -> dict[str, list[str]]:
    """--category-map NAME=CAT1,CAT2 (repeatable): one task made of several categories of a question file."""
    mapping: dict[str, list[str]] = {}
    for entry in entries:
        name, sep, categories = entry.partition("=")
        cats = [c.strip() for c in categories.split(",") if c.strip()]
        if not sep or not name.strip() or not cats:
            raise SpecbenchError(f"--category-map {entry!r}: expected NAME=CATEGORY[,CATEGORY...]")
        mapping[name.strip()] = cats
    return mapping


def selection_from_settings(settings: dict[str, Any]) -> QuestionSelection:
    """The question selection a run was made with (run.json settings; older runs lack the newer keys)."""
    paths = lambda key: [Path(p) for p in settings.get(key) or []]  # noqa: E731
    return QuestionSelection(
        tasks=settings.get("tasks") or ["all"], suite=settings.get("suite"),
        question_files=paths("question_files"), category_map=settings.get("category_map") or {},
        task_files=paths("task_files"), source=settings.get("source", "auto"),
        question_dir=Path(settings["question_dir"]) if settings.get("question_dir") else None,
        begin=settings.get("question_begin"), end=settings.get("question_end"), tail=settings.get("tail"))
