"""Run records: one JSONL line per finished question and method (run.json: specbench.run.run_info).

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


def read_records(out: Path) -> list[Record]:
    path = out / RECORDS
    if not out.exists():
        raise SpecbenchError(f"{out}: no such folder (a run folder: what run --out wrote)")
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


SUPERSEDED = "records.superseded.jsonl"  # records of questions decoded again whole (supersede), kept for the record


def supersede(out: Path, keys: set[tuple]) -> int:
    """Move the records with these keys out of records.jsonl (rewritten whole or not at all) to the end of
    records.superseded.jsonl; returns how many moved. The caller holds the run folder's lock."""
    path = out / RECORDS
    if not keys or not path.is_file():
        return 0
    kept, moved = [], []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.endswith("\n") and line.strip():
                raw = json.loads(line)
                (moved if Record.from_json(raw, str(path)).key() in keys else kept).append(line)
    if not moved:
        return 0
    with (out / SUPERSEDED).open("a", encoding="utf-8") as handle:
        handle.writelines(moved)
        handle.flush()
        os.fsync(handle.fileno())
    replace_text(path, "".join(kept))
    return len(moved)


def replace_text(path: Path, text: str) -> None:
    """Replace path whole or not at all: a full disk leaves the old file, never a cut one."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    replace_text(path, json.dumps(data, indent=2))


def command_line() -> str:
    """The command this process runs, as a user would type it."""
    return " ".join([Path(sys.executable).name, "-m", "specbench", *sys.argv[1:]])


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
