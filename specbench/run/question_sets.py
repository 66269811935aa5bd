"""`specbench tasks download DIR`: the six evaluation sets of the EAGLE paper as question files, DIR/<task>/
question.jsonl, which `--question-dir DIR` reads.

From eagle (the default): the 80-question files of the EAGLE repository (SafeAILab/EAGLE, Apache-2.0,
eagle/data/<folder>/question.jsonl) at a pinned commit, each checked against its SHA-256 and written as it is: the
same questions every committed report here was made with. From hf: the first N rows of each task's HF dataset
through its tasks/*.yaml mapping (`--source hf` reads the same rows): other questions than EAGLE's selection.

How the bytes or rows are fetched is a parameter (`fetch`, `load`), so that the rest is tested offline.
"""
from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from specbench.errors import SpecbenchError
from specbench.run.tasks import DEFAULT_SUITE, Question, Task, available_tasks, load_hf_questions, read_question_file

SOURCES = ("eagle", "hf")
EAGLE_COMMIT = "cd2c25a4357f99ac6c26766e83d3aa930ef8bc17"  # 2024-08-26; the files are unchanged at the newest one
EAGLE_URL = "https://raw.githubusercontent.com/SafeAILab/EAGLE/{commit}/eagle/data/{folder}/question.jsonl"
EAGLE_FILES = {  # task -> (the EAGLE repository's folder, SHA-256 of its question.jsonl at EAGLE_COMMIT)
    "mt_bench": ("mt_bench", "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7"),
    "humaneval": ("humaneval", "ce0244e2b228339e9a11afc63a151719beede1e389fdaec7cd9751d33902180e"),
    "gsm8k": ("gsm8k", "a55920b2f2aac724241124c59e5b8e8168dbbeb2ab0fdbee17d5b0ab6db5ff27"),
    "alpaca": ("alpaca", "8ad3e5a7fc61b88d8e25edb81a52a2ce00a04494d5694c122cb11a5cc26a00df"),
    "cnn_dm": ("sum", "916876f0c42f938a944de96eed16e51425f29f27438cca5c9ef4737c0fedf771"),
    "natural_questions": ("qa", "04252e41ab00bcc03b11940b4a3766cf40ae0b76a09c4f56968ba952f0b029f3"),
}
HF_QUESTIONS = 80  # rows per task with --from hf, as many as EAGLE's files hold

Fetch = Callable[[str], bytes]
LoadQuestions = Callable[[Task, int], list[Question]]


def fetch_url(url: str, timeout: float = 60.0) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise SpecbenchError(f"cannot download {url}: {reason} (no network? then the embedded samples run "
                             "offline, or copy the question files from a machine that has one)") from None


def eagle_files(fetch: Fetch = fetch_url, files: dict[str, tuple[str, str]] | None = None,
                commit: str = EAGLE_COMMIT) -> dict[str, bytes]:
    """Each task's question file from the EAGLE repository, checked against its SHA-256 before anything is written."""
    found = {}
    for task, (folder, digest) in (files or EAGLE_FILES).items():
        url = EAGLE_URL.format(commit=commit, folder=folder)
        data = fetch(url)
        if hashlib.sha256(data).hexdigest() != digest:
            raise SpecbenchError(f"{url}: not the expected file (SHA-256 {hashlib.sha256(data).hexdigest()[:12]}..., "
                                 f"expected {digest[:12]}...); nothing was written")
        found[task] = data
    return found


def hf_files(count: int = HF_QUESTIONS, load: LoadQuestions = load_hf_questions) -> dict[str, bytes]:
    """The first `count` questions of each task's HF dataset, as question-file lines."""
    if count <= 0:
        raise SpecbenchError(f"--limit must be > 0, got {count}")
    found = {}
    for task in available_tasks(DEFAULT_SUITE).values():
        lines = []
        for q in load(task, count):
            row = {"question_id": q.question_id, "category": q.category, "turns": q.turns}
            lines.append(json.dumps(row | ({"reference": q.reference} if q.reference else {}), ensure_ascii=False))
        found[task.name] = "".join(f"{line}\n" for line in lines).encode("utf-8")
    return found


def write_question_files(out: Path, files: dict[str, bytes]) -> list[Path]:
    """DIR/<task's question_file> for each task; a file already there is kept when identical, else refused."""
    tasks = available_tasks(DEFAULT_SUITE)
    paths = {name: out / tasks[name].question_file for name in files}
    for name, path in paths.items():
        if path.exists() and path.read_bytes() != files[name]:
            raise SpecbenchError(f"{path} holds other questions: remove it, or download into another folder")
    for name, path in paths.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".jsonl.tmp")
        partial.write_bytes(files[name])
        partial.replace(path)
        read_question_file(path)  # what --question-dir will read: one line of error here rather than there
    return list(paths.values())


def download(out: Path, source: str = "eagle", count: int = HF_QUESTIONS, fetch: Fetch = fetch_url,
             load: LoadQuestions = load_hf_questions) -> list[Path]:
    """The six question files in `out`, from the EAGLE repository or from the HF datasets."""
    if source not in SOURCES:
        raise SpecbenchError(f"unknown source {source!r}; valid: {', '.join(SOURCES)}")
    files = eagle_files(fetch) if source == "eagle" else hf_files(count, load)
    return write_question_files(out, files)
