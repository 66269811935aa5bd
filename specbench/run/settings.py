"""Tuned settings: what `tune` chose for each method and temperature on a development split, and how `run
--settings FILE` applies them. The file is YAML:

  specbench_settings: 1
  command: the tune command line
  target: ...                       the target it was tuned for
  machine: {cpu: ..., threads: ...}
  dev_questions: {task: [question ids]}
  max_new_tokens: N
  budget: {settings_per_method: 4, questions_per_task: N}
  chosen: {"0.0": {method: "key=value:key=value" or ""}, ...}
  candidates: {"0.0": {method: [{options: ..., speedup: ..., tau: ...}, ...]}}

A run that applies it must evaluate other questions than those it was tuned on, at temperatures it was tuned for.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from specbench.errors import SpecbenchError
from specbench.method import join_options, parse_options
from specbench.run.tasks import Question, Task

VERSION = 1


@dataclass
class TunedSettings:
    target: str
    chosen: dict[str, dict[str, str]]  # temperature (as str(float)) -> method -> option string
    dev_questions: dict[str, list[str]]  # task -> question ids tuning decoded
    max_new_tokens: int | None = None
    command: str = ""
    machine: dict[str, Any] = field(default_factory=dict)
    budget: dict[str, int] = field(default_factory=dict)
    candidates: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)

    def to_yaml(self) -> str:
        return yaml.safe_dump({"specbench_settings": VERSION, "command": self.command, "target": self.target,
                               "machine": self.machine, "dev_questions": self.dev_questions,
                               "max_new_tokens": self.max_new_tokens, "budget": self.budget, "chosen": self.chosen,
                               "candidates": self.candidates}, sort_keys=False, allow_unicode=True, width=120)


def read_settings(path: Path) -> TunedSettings:
    if not path.is_file():
        raise SpecbenchError(f"--settings {path}: no such file (make one with python -m specbench tune)")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SpecbenchError(f"--settings {path}: not YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict) or raw.get("specbench_settings") != VERSION or not isinstance(raw.get("chosen"), dict):
        raise SpecbenchError(f"--settings {path}: not a settings file written by `specbench tune`")
    return TunedSettings(str(raw.get("target", "")), {str(t): dict(m) for t, m in raw["chosen"].items()},
                         {str(k): [str(q) for q in v] for k, v in (raw.get("dev_questions") or {}).items()},
                         raw.get("max_new_tokens"), str(raw.get("command", "")), raw.get("machine") or {},
                         raw.get("budget") or {}, raw.get("candidates") or {})



def tuned_as(name: str, given: dict[str, Any]) -> str:
    """The key a method's tuned setting is stored under: its bare name, or, for a variant (a method given options
    other than head=, e.g. pld@rule=hf), the name with those options, so that a method and its variant are each
    tuned by the same rule and side by side."""
    return join_options(name, {k: v for k, v in given.items() if k != "head"})


def apply_settings(methods: list[str], temperatures: list[float], tuned: TunedSettings, path: Path) -> list[str]:
    """Each method of --methods with the options tuned for the run's temperatures added after its own (an option
    it was given keeps its value; a method that was not tuned, or was tuned to its defaults, is unchanged)."""
    missing = [t for t in temperatures if str(float(t)) not in tuned.chosen]
    if missing:
        raise SpecbenchError(f"--settings {path} was tuned at T={', '.join(tuned.chosen)}, not at T={missing[0]:g}: "
                             "tune at that temperature too, or run the tuned temperatures only")
    out = []
    for spec in methods:
        name, given = spec.partition("@")[0], parse_options(spec)
        key = tuned_as(name, given)
        choices = {tuned.chosen[str(float(t))].get(key) for t in temperatures}
        if len(choices) > 1:
            raise SpecbenchError(f"--settings {path}: {key} was tuned to different settings at the run's "
                                 "temperatures; run each temperature separately")
        chosen = parse_options(f"{name}@{choices.pop() or ''}")
        out.append(join_options(name, {**given, **{k: v for k, v in chosen.items() if k not in given}}))
    return out


def check_disjoint(tuned: TunedSettings, selected: dict[str, tuple[Task, list[Question]]], path: Path) -> None:
    """A run with --settings must not evaluate a question its settings were tuned on."""
    for name, (_, questions) in selected.items():
        seen = set(tuned.dev_questions.get(name, ()))
        both = [str(q.question_id) for q in questions if str(q.question_id) in seen]
        if both:
            raise SpecbenchError(f"--settings {path} was tuned on {name} question {both[0]}, which this run "
                                 f"evaluates ({len(both)} such): evaluate other questions (e.g. a smaller --limit)")
