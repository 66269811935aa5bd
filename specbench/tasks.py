"""Task definitions (tasks/*.yaml) and their questions: from a question-file directory in the EAGLE/Spec-Bench
format, from an HF dataset through the task's field mapping, or from the task's embedded sample."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

import yaml

from specbench.errors import SpecbenchError

SOURCES = ("auto", "embedded", "files", "hf")


@dataclass
class Question:
    question_id: int | str
    category: str
    turns: list[str]
    reference: list[str] | None = None


@dataclass
class Task:
    name: str
    description: str
    question_file: str  # relative to a --question-dir
    max_new_tokens: int
    order: int = 0  # position in tables (the EAGLE paper's column order)
    hf: dict[str, Any] = field(default_factory=dict)
    embedded: list[dict[str, Any]] = field(default_factory=list)


def available_tasks() -> dict[str, Task]:
    found: dict[str, Task] = {}
    for entry in sorted(resources.files("specbench.builtin_tasks").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            spec = yaml.safe_load(entry.read_text(encoding="utf-8"))
            found[spec["name"]] = Task(**spec)
    return dict(sorted(found.items(), key=lambda kv: kv[1].order))


def select_tasks(names: list[str]) -> list[Task]:
    known = available_tasks()
    if names == ["all"]:
        return list(known.values())
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SpecbenchError(f"unknown task {', '.join(unknown)}; valid: all, {', '.join(known)}")
    return [known[n] for n in names]


def _question(raw: Any, where: str) -> Question:
    if not isinstance(raw, dict):
        raise SpecbenchError(f"{where}: a question must be a JSON object")
    turns = raw.get("turns")
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise SpecbenchError(f"{where}: 'turns' must be a non-empty list of strings")
    if any(not t.strip() for t in turns):
        raise SpecbenchError(f"{where}: empty prompt in 'turns'")
    if "question_id" not in raw:
        raise SpecbenchError(f"{where}: missing 'question_id'")
    reference = raw.get("reference")
    return Question(raw["question_id"], str(raw.get("category", "")), list(turns), reference)


def read_question_file(path: Path) -> list[Question]:
    if not path.is_file():
        raise SpecbenchError(f"{path}: no such question file")
    questions = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SpecbenchError(f"{path}:{number}: invalid JSON ({exc.msg})") from None
            questions.append(_question(raw, f"{path}:{number}"))
    if not questions:
        raise SpecbenchError(f"{path}: no questions")
    ids = [q.question_id for q in questions]
    if len(set(map(str, ids))) != len(ids):
        raise SpecbenchError(f"{path}: duplicate question_id")
    return questions


def questions_from_rows(rows: Iterable[dict[str, Any]], mapping: dict[str, Any], task: str) -> list[Question]:
    """Apply a task's HF field mapping: id_field (else the row index), category or category_field, and either
    turns_field (a list of user turns) or turns (format strings over the row's fields)."""
    questions = []
    for index, row in enumerate(rows):
        where = f"{task} row {index}"
        if "turns_field" in mapping:
            turns = row[mapping["turns_field"]]
            turns = [turns] if isinstance(turns, str) else list(turns)
        else:
            try:
                turns = [template.format(**row).strip() for template in mapping["turns"]]
            except KeyError as exc:
                raise SpecbenchError(f"{where}: the dataset has no field {exc} named in the task's mapping") from None
        category = row[mapping["category_field"]] if "category_field" in mapping else mapping.get("category", task)
        question_id = row[mapping["id_field"]] if mapping.get("id_field") else index
        questions.append(_question({"question_id": question_id, "category": category, "turns": turns}, where))
    return questions


def load_hf_questions(task: Task, limit: int | None, path: str | None = None) -> list[Question]:
    """Questions from the task's HF dataset (or `path`, a local dataset folder with the same fields)."""
    import datasets

    mapping = task.hf
    split = mapping["split"] if limit is None else f"{mapping['split']}[:{limit}]"
    try:
        rows = datasets.load_dataset(path or mapping["path"], mapping.get("name"), split=split)
    except Exception as exc:  # datasets raises many types for offline / missing data
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecbenchError(f"cannot load HF dataset {path or mapping['path']} for {task.name}: {first}") from None
    return questions_from_rows(rows, mapping, task.name)


def load_questions(task: Task, source: str, question_dir: Path | None, limit: int | None) -> list[Question]:
    if source == "auto":
        source = "files" if question_dir else "embedded"
    if source == "files":
        if question_dir is None:
            raise SpecbenchError("--source files needs --question-dir")
        questions = read_question_file(question_dir / task.question_file)
    elif source == "hf":
        questions = load_hf_questions(task, limit)
    elif source == "embedded":
        questions = [_question(raw, f"tasks/{task.name}.yaml embedded[{i}]") for i, raw in enumerate(task.embedded)]
    else:
        raise SpecbenchError(f"unknown question source {source!r}; valid: {', '.join(SOURCES)}")
    return questions[:limit] if limit else questions
