"""The budget-and-settings table of every report: per method, what its drafter was trained on (data, positions,
precision, hours on what hardware: read from the weights' train.json and log.jsonl) and the settings it ran with
(its options, and whether `tune` chose them, on which development split). A row without a known budget says so;
a reference row (hf-compiled, hf-eager) says how it decodes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbench.errors import SpecbenchError
from specbench.jsonl import json_lines
from specbench.method import OBJECTIVE_KEY, parse_options
from specbench.run.registry import REFERENCES
from specbench.run.run_info import RunInfo
from specbench.run.settings import read_settings


def _last_log_line(folder: Path) -> dict[str, Any]:
    log = folder / "log.jsonl"
    if not log.is_file():
        return {}
    last: dict[str, Any] = {}
    for _, row in json_lines(log):
        if isinstance(row, dict):
            last = row
    return last


def repository_path(folder: str, root: Path = Path(".")) -> str:
    """A drafter folder as the repository names it, from its last `heads` part on (heads/eagle/...), whichever
    checkout the run loaded it from, where the checkout at `root` (the folder reports are made in) has it; other
    folders (a user's own) as they are."""
    parts = Path(folder).parts
    if Path(folder).is_absolute() and "heads" in parts:
        inside = Path(*parts[len(parts) - 1 - parts[::-1].index("heads"):])
        if len(inside.parts) > 2 and (root / inside).is_dir():  # heads/<method>/<target>...
            return inside.as_posix()
    return folder


def training_objective(path: Path) -> str:
    """What the drafter's config.json says it was trained with (OBJECTIVE_KEY), as words for a cell; "" where it
    says nothing (drafters from before the record, and those with one objective)."""
    config = path / "config.json"
    recorded = json.loads(config.read_text(encoding="utf-8")).get(OBJECTIVE_KEY) if config.is_file() else None
    if not isinstance(recorded, dict):
        return ""
    settings = ", ".join(f"{k}={v}" for k, v in recorded.items() if k != "name")
    return f"; objective {recorded.get('name')}" + (f" ({settings})" if settings else "")


def training_budget(folder: str) -> dict[str, str]:
    """What the weights in `folder` were trained on, as table cells (read in this checkout's heads/ where it has
    them, else where the run loaded them); "unknown" where nothing recorded it."""
    path = Path(repository_path(folder))
    if not path.is_dir():
        return {"data": f"{repository_path(folder)} (not a local folder: its training is not recorded here)",
                "positions": "unknown",
                "precision": "unknown", "time": "unknown"}
    final = _last_log_line(path)
    positions = f"{final['tokens'] / 1e6:.2f}M" if "tokens" in final else "unknown"
    train_file = path / "train.json"
    if not train_file.is_file():
        return {"data": "not recorded (no train.json; see heads/README.md)", "positions": positions,
                "precision": "unknown", "time": f"{final['hours']:.2f} h" if "hours" in final else "unknown"}
    train = json.loads(train_file.read_text(encoding="utf-8"))
    data, settings, machine = train.get("data", {}), train.get("settings", {}), train.get("machine", {})
    source = data.get("dataset") or data.get("data") or data.get("features", "?")
    described = f"{Path(str(source)).name}: {data.get('conversations', '?')} conversations" + (
        f" ({data['chunks']} chunks)" if "chunks" in data else f" ({data['mode']} replies)" if "mode" in data else "")
    if train.get("options"):  # the trainer's own options (--opt), e.g. a draft trained from scratch
        described += "; " + ", ".join(f"{k}={v}" for k, v in train["options"].items())
    hardware = machine.get("cuda_device") or machine.get("cpu", "?")
    threads = f", {machine['torch_threads']} threads" if "torch_threads" in machine else ""
    return {"data": described, "positions": positions,
            "precision": settings.get("autocast") or "fp32",
            "time": f"{final.get('hours', float('nan')):.2f} h on {hardware}{threads}"
                    f"; lr {settings.get('lr', '?')}, {settings.get('batch_tokens', '?')} tokens per batch"
                    f"{training_objective(path)}"}


def budget_table(info: RunInfo) -> str:
    """The table as Markdown, from a run's run.json."""
    settings = info.settings
    trained: dict[str, str] = {}
    for worker in info.workers:
        trained.update(worker.get("trained_from") or {})
    tuned, tuned_note = None, ""
    if settings.get("settings_file"):
        path = Path(settings["settings_file"])
        try:
            tuned = read_settings(path)
            split = "; ".join(f"{task} {', '.join(ids)}" for task, ids in tuned.dev_questions.items())
            tuned_note = f"tuned by `tune` ({path.name}; development split: {split})"
        except SpecbenchError:
            tuned_note = f"tuned by `tune` ({path}, no longer readable)"
    # Each row's label names every option set for it (by @ or --opt); runs from before declared options name only
    # the @ ones, and their --opt options apply to each method that read them.
    methods = list(info.method_options or settings.get("methods", []))
    if settings.get("baseline", True) and "vanilla" not in [m.partition("@")[0] for m in methods]:
        methods.insert(0, "vanilla")
    common = "" if info.method_options or not settings.get("options") else \
        "; --opt " + " ".join(f"{k}={v}" for k, v in settings["options"].items()) + " (each method that reads it)"
    lines = ["| method | settings | trained from | data | positions | precision | time |", "|---|---|---|---|---|---|---|"]
    for spec in dict.fromkeys(methods):
        if spec in REFERENCES:  # a reference row: how it decodes, as it ran
            ran = info.method_options.get(spec) or {}
            shown = "; ".join(str(ran.get(k)) for k in ("decoder", "compile", "modules") if ran.get(k))
            lines.append(f"| {spec} | {shown or REFERENCES[spec]} | reference row (not a method) | | | | |")
            continue
        options = parse_options(spec)
        shown = (", ".join(f"{k}={v}" for k, v in options.items() if k != "head") or "defaults") + common
        base = spec.partition("@")[0]
        if tuned_note and (tuned is None or any(base in chosen for chosen in tuned.chosen.values())):
            shown += f"; {tuned_note}"
        folder = trained.get(spec)
        if folder is None:
            lines.append(f"| {spec} | {shown} | training-free | | | | |")
            continue
        b = training_budget(folder)
        lines.append(f"| {spec} | {shown} | {repository_path(folder)} | {b['data']} | {b['positions']} | {b['precision']} | {b['time']} |")
    return "\n".join(lines)
