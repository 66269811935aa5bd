"""The GPU-runtime device calls rehearsed on this CPU exactly as the device machine gets them (issue 61,
scripts/device/rehearse.sh): the tree that travels, the carried folders, the image's Python without the carried
packages, every step's exit status. The next change that moves a file the device needs fails here, not on a GPU."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]
needs_shared = pytest.mark.skipif(not (SHARED_DATA / "tasks").is_dir() or not (SHARED_DATA / "train").is_dir(),
                                  reason=f"the carried folders are built from {SHARED_DATA} (tasks, training "
                                         "prompts), absent here")


def rehearse(work: Path, **env: str) -> subprocess.CompletedProcess:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # this environment's python first
    return subprocess.run(["bash", str(ROOT / "scripts" / "device" / "rehearse.sh"), str(work)], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "PATH": path, **env}, timeout=3000)


@needs_shared
def test_the_device_calls_pass_as_the_device_gets_them(tmp_path):
    done = rehearse(tmp_path)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]
    assert "every step of the device calls exited 0" in log
    for step in ("setup: exit 0", "doctor: exit 0", "graphs fp32: exit 0", "eager fp32: exit 0",
                 "graphs vanilla = eager vanilla (fp32): exit 0", "CUDA mask and capture tests: exit 0",
                 "every graphs run captured before timing: exit 0", "host work per step: exit 0"):
        assert step in log, step
    runs = tmp_path / "device" / "keep" / "runs"
    out = tmp_path / "device" / "out"
    assert (runs / "graphs-float32" / "records.jsonl").is_file() and (out / "gpu-runtime.tgz").is_file()
    assert (out / "overhead" / "overhead.md").is_file()
    assert not (tmp_path / "device" / "tree" / "reports").exists()  # the tree travelled without the data folders


@needs_shared
def test_a_drafter_pointer_left_out_of_the_carried_folders_fails_the_rehearsal(tmp_path):
    done = rehearse(tmp_path, OMIT="heads/eagle/smollm2-135m-instruct/DEFAULT", CALLS="1")
    log = done.stdout + done.stderr
    assert done.returncode != 0
    steps = (tmp_path / "device" / "out" / "log.txt").read_text()  # what the steps printed
    assert "FAIL  eagle for smollm2-135m-instruct: no DEFAULT file names a drafter" in steps, log[-4000:]
    assert "rehearse: left out .dev" in log
    assert "stopping: nothing after the failed step can work" in log  # no device time spent on runs that would fail
    assert "graphs fp32 (limit" not in log


def test_the_tree_that_travels_has_no_data_folders():
    files = subprocess.run(["bash", "scripts/device/aside.sh", "files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    assert "scripts/device/gpu_runtime.sh" in files and "specbench/decode/runner.py" in files
    assert not [f for f in files if f.split("/")[0] in ("heads", "reports", "results")]
