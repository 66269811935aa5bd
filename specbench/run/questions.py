"""One question as a harness decodes it, and the rows it is read from: question-file lines (the EAGLE/Spec-Bench
format, or SPEED-Bench's prepared files, whose user turns are `messages`) and HF dataset rows through a task's field
mapping. specbench.run.tasks says which rows make which task."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from specbench.errors import SpecbenchError
from specbench.jsonl import json_lines


@dataclass
class Question:
    question_id: int | str
    category: str
    turns: list[str]
    reference: list[str] | None = None


def _user_turns(messages: Any) -> Any:
    """The user contents of OpenAI-style messages (what SPEED-Bench's prepare.py writes in place of `turns`)."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return None
    return [m.get("content") for m in messages if m.get("role", "user") == "user"]


def question_from_raw(raw: Any, where: str) -> Question:
    if not isinstance(raw, dict):
        raise SpecbenchError(f"{where}: a question must be a JSON object")
    turns = raw.get("turns") if "turns" in raw else _user_turns(raw.get("messages"))
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise SpecbenchError(f"{where}: 'turns' (or 'messages' with user contents) must be a non-empty list of strings")
    if any(not t.strip() for t in turns):
        raise SpecbenchError(f"{where}: empty prompt in 'turns'")
    if "question_id" not in raw:
        raise SpecbenchError(f"{where}: missing 'question_id'")
    reference = raw.get("reference")
    return Question(raw["question_id"], str(raw.get("category", "")), list(turns), reference)


def read_question_file(path: Path, need_category: bool = False) -> list[Question]:
    if not path.is_file():
        raise SpecbenchError(f"{path}: no such question file")
    questions = []
    for number, raw in json_lines(path):
        if need_category and (not isinstance(raw, dict) or not str(raw.get("category") or "").strip()):
            raise SpecbenchError(f"{path}:{number}: no 'category' (a question file's categories make its tasks)")
        questions.append(question_from_raw(raw, f"{path}:{number}"))
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
        questions.append(question_from_raw({"question_id": question_id, "category": category, "turns": turns}, where))
    return questions


def without_placeholders(questions: list[Question], placeholders: Iterable[str]) -> list[Question]:
    """The questions whose first turn starts with none of the placeholders (SPEED-Bench publishes the rows whose
    source may not be redistributed with such a text in place of the prompt)."""
    marks = tuple(p for p in placeholders if p)
    return [q for q in questions if not q.turns[0].startswith(marks)] if marks else questions
