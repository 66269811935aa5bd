"""A drafter named by its hub id (`method@head=owner/name`, `--draft owner/name`) loads from the HF cache as a local
folder would (issue 81). The cache here is a folder laid out as huggingface_hub lays it out, offline, so nothing
touches the network; the refusals (offline and not cached, no such folder) come before the target loads."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig

from specbench.methods.eagle.checkpoint import save_head
from specbench.methods.eagle.head import EagleHead, head_config

REPO = Path(__file__).resolve().parents[1]


def cached(hub: Path, repo_id: str, files_from: Path) -> Path:
    """repo_id in an HF hub cache at `hub`: its files as one snapshot, refs/main naming it."""
    owner, name = repo_id.split("/")
    root = hub / f"models--{owner}--{name}"
    snapshot = root / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(files_from, snapshot)
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(snapshot.name)
    return snapshot


def specbench(*args: str, hub: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "specbench", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def hub(tiny_target_dir, tiny_draft_dir, tmp_path_factory) -> Path:
    hub = tmp_path_factory.mktemp("hub")
    heads = tmp_path_factory.mktemp("heads")
    torch.manual_seed(0)
    save_head(EagleHead(head_config(AutoConfig.from_pretrained(tiny_target_dir))), heads / "eagle",
              draft_vocab=None, dtype=torch.float32)
    cached(hub, "someone/tiny-eagle-head", heads / "eagle")
    cached(hub, "someone/tiny-draft", tiny_draft_dir)
    return hub


def test_a_head_and_a_draft_load_by_hub_id_from_the_cache(hub, tiny_target_dir, tmp_path):
    out = tmp_path / "run"
    done = specbench("run", "--target", str(tiny_target_dir), "--methods", "vanilla,eagle@head=someone/tiny-eagle-head,sps",
                     "--draft", "someone/tiny-draft", "--tasks", "gsm8k", "--limit", "1", "--max-new-tokens", "8",
                     "--temperatures", "0", "--out", str(out), "--report-dir", str(out / "report"), hub=hub, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    check = specbench("check", str(out), hub=hub, cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    budget = (out / "report" / "budget.md").read_text()
    assert "models--someone--tiny-eagle-head" in budget  # the row says which weights it decoded with


@pytest.mark.parametrize("args, says", [
    (["--methods", "eagle@head=someone/not-cached"], "someone/not-cached: a hub id, and HF_HUB_OFFLINE=1 while it is "
                                                      "not in the local cache"),
    (["--methods", "eagle", "--draft", "no/such/folder"], "--draft no/such/folder: no such folder"),
], ids=["offline hub id", "missing folder"])
def test_an_unreachable_drafter_is_refused_in_one_line_before_the_target_loads(hub, tiny_target_dir, tmp_path, args,
                                                                               says):
    started = time.perf_counter()
    done = specbench("run", "--target", str(tiny_target_dir), *args, "--out", str(tmp_path / "r"), hub=hub,
                     cwd=tmp_path)
    assert done.returncode != 0 and says in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert time.perf_counter() - started < 30
    assert not (tmp_path / "r").exists()
