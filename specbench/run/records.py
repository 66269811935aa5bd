"""Run records: one JSONL line per finished question and method, plus run.json with settings and environment.

A line is appended (and flushed to disk) only when a question is complete, so a killed run loses at most the
question in flight, and a restart with the same --out skips what is done.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from specbench.errors import SpecbenchError
from specbench.run.record import Record

RECORDS = "records.jsonl"
RUN_INFO = "run.json"


def read_records(out: Path) -> list[Record]:
    path = out / RECORDS
    if not path.is_file():
        raise SpecbenchError(f"{out}: no {RECORDS} (not a specbench run directory)")
    return list(_complete_lines(path))


def _complete_lines(path: Path) -> Iterator[Record]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.endswith("\n"):
                return  # a line cut by a kill: not a finished record
            if line.strip():
                try:
                    raw = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise SpecbenchError(f"{path}:{number}: invalid JSON ({exc.msg})") from None
                yield Record.from_json(raw, f"{path}:{number}")


class RecordWriter:
    """Appends finished records; knows which keys are already done."""

    def __init__(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / RECORDS
        if self.path.is_file():
            self._drop_cut_tail()
            self.done = {r.key() for r in _complete_lines(self.path)}
        else:
            self.done = set()

    def _drop_cut_tail(self) -> None:
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            with self.path.open("r+b") as handle:
                handle.truncate(data.rfind(b"\n") + 1)

    def write(self, record: Record) -> None:
        """Append one whole line. On a failed write (full disk, vanished folder) the part written is cut off again
        where possible, so the file keeps whole records only, and the error names the file."""
        line = (json.dumps(record.to_json(), ensure_ascii=False) + "\n").encode("utf-8")
        try:
            with self.path.open("ab") as handle:
                size = handle.tell()
                try:
                    handle.write(line)
                    handle.flush()
                    os.fsync(handle.fileno())
                except OSError:
                    _cut(handle, size)
                    raise
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None
        self.done.add(record.key())


def _cut(handle: Any, size: int) -> None:
    try:
        handle.truncate(size)
    except OSError:
        pass  # a cut line is skipped by every reader and dropped on resume (RecordWriter._drop_cut_tail)


def environment(device: str, dtype: str) -> dict[str, Any]:
    import torch
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "dtype": dtype,
        "cuda_device": torch.cuda.get_device_name() if device.startswith("cuda") else None,
        "git_commit": git_commit(),
    }


def git_commit() -> str | None:
    """The short commit, with -dirty when the work tree has uncommitted changes (the code run is then not it)."""
    try:
        result = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=7"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() or None


# Settings a resumed run must share (device is checked as resolved, in check_same_hardware).
FIXED_SETTINGS = ("target", "max_new_tokens", "seed", "top_p", "top_k", "source", "question_dir", "draft", "options",
                  "dtype", "runtime", "suite", "question_files", "category_map", "task_files")


def check_resumable(out: Path, settings: dict[str, Any]) -> None:
    """A run directory may be resumed (methods, tasks, limit may grow) only with the same fixed settings."""
    path = out / RUN_INFO
    if not path.is_file():
        return
    previous = json.loads(path.read_text(encoding="utf-8"))["settings"]
    # An empty value equals a missing one: runs made before a setting existed stay resumable.
    changed = [k for k in FIXED_SETTINGS if (previous.get(k) or None) != (settings.get(k) or None)]
    if changed:
        detail = ", ".join(f"{k}: {previous.get(k)!r} -> {settings.get(k)!r}" for k in changed)
        raise SpecbenchError(f"{out} holds a run with other settings ({detail}); use another --out")


def check_same_hardware(out: Path, env: dict[str, Any]) -> None:
    """A resumed run must decode on the device and dtype it started on (--device auto may resolve otherwise)."""
    previous = read_run_info(out).get("environment") or {}
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
    path = out / RUN_INFO
    if path.is_file():
        info = json.loads(path.read_text(encoding="utf-8"))
        info.setdefault("resumed", []).append(utc_now())
    else:
        out.mkdir(parents=True, exist_ok=True)
        info = {"command": command_line(),
                "started": utc_now(), "settings": settings, "environment": env}
    if costs is not None:
        info["costs"] = costs
    if workers is not None:
        info["workers"] = workers
    if methods is not None:
        info["method_options"] = {**info.get("method_options", {}), **methods}
    write_json(path, info)


def write_load_log(out: Path, log: dict[str, Any]) -> None:
    """Add or update this session's load log (specbench.run.load.LoadLog, keyed by when the session started)."""
    info = read_run_info(out)
    logs = [entry for entry in info.get("load", []) if entry.get("started") != log["started"]]
    info["load"] = [*logs, log]
    write_json(out / RUN_INFO, info)


def write_json(path: Path, data: Any) -> None:
    """Replace path whole or not at all: a full disk leaves the old file, never a cut one."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(json.dumps(data, indent=2), encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)
        raise


def command_line() -> str:
    """The command this process runs, as a user would type it."""
    return " ".join([Path(sys.executable).name, "-m", "specbench", *sys.argv[1:]])


def read_run_info(out: Path) -> dict[str, Any]:
    path = out / RUN_INFO
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
