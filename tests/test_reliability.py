"""Faults and concurrency: one writer per run folder (and report folder), one line and nothing lost on a full
disk, a vanished run folder, a read-only report folder or Ctrl-C, and a resumed run that completes the work."""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from specbench.cli import main
from specbench.run import decoder as decoder_module
from specbench.run import records as records_module
from specbench.run.lock import OWNER, folder_lock
from tests.test_cli import run_args

ROOT = Path(__file__).resolve().parents[1]
SMALL = ("--methods", "vanilla,pld", "--tasks", "gsm8k,mt_bench", "--limit", "2", "--temperatures", "0")


def keys(out: Path) -> Counter:
    lines = (out / "records.jsonl").read_text(encoding="utf-8").splitlines()
    return Counter((r["method"], r["task"], r["temperature"], str(r["question_id"]), r.get("repeat", 0),
                    r.get("batch_size", 1)) for r in map(json.loads, lines))


def one_error_line(err: str) -> str:
    """The error is one line, the last one (progress bars and warnings of the run may come before it)."""
    errors = [line for line in err.splitlines() if "error" in line.lower() or "Traceback" in line]
    assert len(errors) == 1 and errors[0].startswith("specbench: error: "), err
    assert err.rstrip().endswith(errors[0]), err
    return errors[0]


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_two_concurrent_runs_on_one_folder(tiny_target_dir, tmp_path):
    """A second run started while the first decodes (a second terminal, a retried job) stops with one line naming
    the first's pid, and every record is written once. The second process has imported everything before the
    first takes the lock, so it reaches the lock while the first still holds it (at least its 0.5 s load reading)."""
    out = tmp_path / "r"
    args = run_args(tiny_target_dir, out, *SMALL)
    second = spawn("-c", "import sys, time; from pathlib import Path; from specbench.cli import main\n"
                         # the CLI imports the run's modules after parsing: import them (and every method) first
                         "import specbench.run.runner; from specbench.run.registry import available_methods\n"
                         "available_methods()\n"
                         f"while not Path({str(out / OWNER)!r}).is_file(): time.sleep(0.01)\n"
                         f"sys.exit(main({args!r}))")
    first = spawn("-m", "specbench", *args)
    errors = [run.communicate(timeout=300)[1] for run in (first, second)]
    assert (first.returncode, second.returncode) == (0, 2), errors
    line = one_error_line(errors[1])
    assert f"is being written by pid {first.pid}" in line, line
    counts = keys(out)
    assert len(counts) == 2 * 2 * 2 and set(counts.values()) == {1}  # methods x tasks x questions, once each


def test_a_killed_holder_leaves_no_stuck_lock(tiny_target_dir, tmp_path, capsys):
    out = tmp_path / "r"
    holder = spawn("-c", "import sys, time; from pathlib import Path; from specbench.run.lock import OWNER, folder_lock\n"
                         f"with folder_lock(Path({str(out)!r}), 'run folder'):\n"
                         "    print('locked', flush=True); time.sleep(600)")
    assert holder.stdout.readline().strip() == "locked"
    assert main(run_args(tiny_target_dir, out, *SMALL)) == 2
    assert f"pid {holder.pid}" in one_error_line(capsys.readouterr().err)
    assert not (out / "records.jsonl").exists()
    holder.kill()  # SIGKILL: no cleanup runs; the kernel drops the lock with the process
    holder.wait()
    assert main(run_args(tiny_target_dir, out, *SMALL)) == 0
    assert len(keys(out)) == 8


def test_report_folder_has_one_writer(tmp_path):
    with folder_lock(tmp_path / "rep", "report folder"):
        with pytest.raises(Exception, match="report folder .* is being written by pid"):
            with folder_lock(tmp_path / "rep", "report folder"):
                pass
    with folder_lock(tmp_path / "rep", "report folder"):  # released: free again
        pass


def fail_after(count: int, exc: OSError, then=None):
    """An fsync that raises exc from the count-th record on (after calling then), as a full disk does."""
    real, calls = os.fsync, [0]

    def fsync(fd: int) -> None:
        calls[0] += 1
        if calls[0] >= count:
            if then:
                then()
            raise exc
        real(fd)
    return fsync


def test_full_disk_is_one_line_and_the_run_resumes(tiny_target_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "r"
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(records_module.os, "fsync", fail_after(3, full))
    assert main(run_args(tiny_target_dir, out, *SMALL)) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "No space left on device" in line and "records.jsonl" in line and "rerun the same command" in line
    text = (out / "records.jsonl").read_text(encoding="utf-8")
    assert text.endswith("\n") and len(keys(out)) == 2  # the two finished records, whole; the third cut off
    json.loads((out / "run.json").read_text())  # never left half written
    monkeypatch.undo()
    assert main(run_args(tiny_target_dir, out, *SMALL)) == 0
    counts = keys(out)
    assert len(counts) == 8 and set(counts.values()) == {1}


def test_a_vanished_run_folder_is_one_line(tiny_target_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "r"
    gone = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
    monkeypatch.setattr(records_module.os, "fsync", fail_after(2, gone, then=lambda: shutil.rmtree(out)))
    assert main(run_args(tiny_target_dir, out, *SMALL)) == 1
    line = one_error_line(capsys.readouterr().err)
    assert f"{out} vanished" in line, line


def test_a_read_only_report_folder_is_one_line(tiny_target_dir, tmp_path, monkeypatch, capsys):
    out, report = tmp_path / "r", tmp_path / "report"
    assert main(run_args(tiny_target_dir, out, *SMALL)) == 0
    finished = (out / "records.jsonl").read_text(encoding="utf-8")
    capsys.readouterr()
    report.mkdir()
    if os.geteuid() != 0:
        report.chmod(0o555)
    else:  # root ignores permission bits: a write into the folder fails as it would for anyone else
        real = Path.write_text

        def write_text(self: Path, *args, **kwargs):
            if self.parent == report:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
            return real(self, *args, **kwargs)
        monkeypatch.setattr(Path, "write_text", write_text)
    try:
        assert main(["report", str(out), "--out", str(report)]) == 1
    finally:
        report.chmod(0o755)
    line = one_error_line(capsys.readouterr().err)
    assert "Permission denied" in line and str(report) in line, line
    assert (out / "records.jsonl").read_text(encoding="utf-8") == finished


def test_ctrl_c_keeps_finished_records_and_resumes(tiny_target_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "r"
    real, calls = decoder_module.Decoder.decode, [0]

    def decode(self, job, progress=None):
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt
        yield from real(self, job, progress)
    monkeypatch.setattr(decoder_module.Decoder, "decode", decode)
    assert main(run_args(tiny_target_dir, out, *SMALL)) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("specbench: interrupted") and "rerun with the same --out" in err[-1]
    assert len(keys(out)) == 4  # two questions' records (vanilla and pld each)
    monkeypatch.undo()
    assert main(run_args(tiny_target_dir, out, *SMALL)) == 0  # the lock went with the interrupted run
    assert len(keys(out)) == 8
