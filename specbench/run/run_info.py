"""run.json, typed: what a run decoded with (settings), where (environment, workers), its fixed costs, the options
each method ran with, and how its sessions went (resumptions, machine load). The run's one writer creates and
updates it; every reader gets a RunInfo from read_run_info.

Schema versions: 1 is every run.json written before the schema was named (no "schema" key); 2 adds the key and
`method_options`. A field that early runs did not write reads as its default.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from specbench.decode.names import Runtime
from specbench.errors import SpecbenchError
from specbench.run.records import command_line, utc_now, write_json

# The costs a run measured, written as soon as they are (before the drafters load and warm up): a session stopped
# before run.json exists leaves them to its resumes, which decide with them instead of measuring again. Removed once
# run.json holds them (RunWriter).
FOLDER_COSTS = "costs.json"

RUN_INFO = "run.json"
SCHEMA = 2


@dataclass
class RunInfo:
    command: str = ""
    started: str = ""
    settings: dict[str, Any] = field(default_factory=dict)  # RunConfig.settings(): what the run decodes
    environment: dict[str, Any] = field(default_factory=dict)  # versions, device, dtype, threads, git commit
    costs: dict[str, Any] | None = None  # the run's fixed cost model (CostModel.to_dict)
    workers: list[dict[str, Any]] = field(default_factory=list)  # where this session decodes
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> options as run, defaults included
    resumed: list[str] = field(default_factory=list)  # when the run was resumed
    load: list[dict[str, Any]] = field(default_factory=list)  # one LoadLog per session
    schema: int = SCHEMA

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @staticmethod
    def from_json(raw: Any, origin: str) -> "RunInfo":
        """A RunInfo from run.json's object; a malformed one is a SpecbenchError naming origin."""
        if not isinstance(raw, dict):
            raise SpecbenchError(f"{origin}: not a specbench run.json (a {type(raw).__name__}, not an object)")
        if int(raw.get("schema", 1)) > SCHEMA:
            raise SpecbenchError(f"{origin}: schema {raw['schema']} is newer than this specbench's {SCHEMA}: upgrade it")
        known = {f.name for f in fields(RunInfo)} - {"schema"}
        try:
            return RunInfo(**{k: raw[k] for k in known if raw.get(k) is not None})
        except TypeError as exc:
            raise SpecbenchError(f"{origin}: not a specbench run.json ({exc})") from None


def read_run_info(out: Path) -> RunInfo:
    """The run folder's run.json (an empty RunInfo when there is none yet)."""
    path = out / RUN_INFO
    if not path.is_file():
        return RunInfo()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SpecbenchError(f"{path}: not JSON ({exc})") from None
    return RunInfo.from_json(raw, str(path))


# Settings a resumed run must share (device is checked as resolved, in check_same_hardware).
FIXED_SETTINGS = ("target", "max_new_tokens", "seed", "top_p", "top_k", "source", "question_dir", "draft", "options",
                  "dtype", "runtime", "suite", "question_files", "category_map", "task_files")


def comparable(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings with the runtime in its two-choice form (runs from before it hold a single name, e.g. "compiled")."""
    return {**settings, "runtime": asdict(Runtime.of(settings.get("runtime")))}


def check_resumable(out: Path, settings: dict[str, Any]) -> None:
    """A run directory may be resumed (methods, tasks, limit may grow) only with the same fixed settings."""
    if not (out / RUN_INFO).is_file():
        return
    previous, current = comparable(read_run_info(out).settings), comparable(settings)
    # An empty value equals a missing one: runs made before a setting existed stay resumable.
    changed = [k for k in FIXED_SETTINGS if (previous.get(k) or None) != (current.get(k) or None)]
    if changed:
        detail = ", ".join(f"{k}: {previous.get(k)!r} -> {current.get(k)!r}" for k in changed)
        raise SpecbenchError(f"{out} holds a run with other settings ({detail}); use another --out")


def check_same_hardware(out: Path, env: dict[str, Any]) -> None:
    """A resumed run must decode on the device and dtype it started on (--device auto may resolve otherwise)."""
    previous = read_run_info(out).environment
    changed = [k for k in ("device", "dtype") if k in previous and previous[k] != env[k]]
    if changed:
        detail = ", ".join(f"{k}: {previous[k]!r} -> {env[k]!r}" for k in changed)
        raise SpecbenchError(f"{out} holds a run decoded with another {' and '.join(changed)} ({detail}); use another --out")


def write_run_info(out: Path, settings: dict[str, Any], env: dict[str, Any], costs: dict[str, Any] | None = None,
                   workers: list[dict[str, Any]] | None = None, methods: dict[str, dict[str, Any]] | None = None) -> None:
    """Create run.json, or note the resumption in it (the caller has run check_resumable). `costs` is the run's
    fixed cost model; a resumption may add drafting costs of methods it adds. `workers`: where this session
    decodes (host, device, environment of each; a resumption's list replaces the earlier one, records keep theirs).
    `methods`: each method's options as it runs, defaults included (a resumption adds or updates its rows)."""
    if (out / RUN_INFO).is_file():
        info = read_run_info(out)
        info.resumed.append(utc_now())
    else:
        out.mkdir(parents=True, exist_ok=True)
        info = RunInfo(command=command_line(), started=utc_now(), settings=settings, environment=env)
    if costs is not None:
        info.costs = costs
    if workers is not None:
        info.workers = workers
    if methods is not None:
        info.method_options = {**info.method_options, **methods}
    write_json(out / RUN_INFO, info.to_json())


def write_load_log(out: Path, log: dict[str, Any]) -> None:
    """Add or update this session's load log (specbench.run.load.LoadLog, keyed by when the session started)."""
    info = read_run_info(out)
    info.load = [*(entry for entry in info.load if entry.get("started") != log["started"]), log]
    write_json(out / RUN_INFO, info.to_json())


def write_capture_report(out: Path, report: dict[str, Any]) -> None:
    """The fixed shapes' capture report as the session ends (decoder.CaptureReport.to_dict), in place of the
    line the warm-up wrote into the environment."""
    info = read_run_info(out)
    info.environment["cuda_graphs"] = report
    write_json(out / RUN_INFO, info.to_json())


def uncaptured_note(info: RunInfo) -> str | None:
    """A table header's line where CUDA graphs were asked for and did not hold: a failed capture (UNCAPTURED, and
    why) or shapes first captured inside timed questions; None otherwise (or on the CPU, where none are asked)."""
    report = info.environment.get("cuda_graphs")
    if not isinstance(report, dict) or not report.get("asked"):
        return None
    notes = []
    if report.get("uncaptured"):
        notes.append(f"UNCAPTURED: a CUDA graph capture failed and the rest ran uncaptured ({report['uncaptured']})")
    timed = report.get("target_timed", 0) + report.get("drafting_timed", 0)
    if timed:
        notes.append(f"{timed} shapes were first captured inside timed questions (their time includes the capture)")
    if report.get("own_shape_timed"):
        notes.append(f"{report['own_shape_timed']} timed forwards ran uncaptured at their own shape (a prompt past "
                     "the largest bucket, or a drafter's call over a subset of the rows)")
    return "; ".join(notes) or None
