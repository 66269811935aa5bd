"""A first run anywhere: --threads and its default beside other work, tokens and tok/s inside a question, the
report next to the run (never into the working directory's reports/), and `tasks download` writing the question
files --question-dir reads (offline: the fetcher and the HF loader are parameters)."""
from __future__ import annotations

import functools
import hashlib
import http.server
import json
import threading

import pytest
import torch

from specbench.cli import main
from specbench.decode.engine import generate_batch
from specbench.decode.sampling import Sampling
from specbench.errors import SpecbenchError
from specbench.run.load import decoding_threads, threads_note, usable_cores, warning
from specbench.run.plan import Job
from specbench.run.progress import TokenProgress
from specbench.run.question_sets import (
    EAGLE_COMMIT,
    EAGLE_FILES,
    EAGLE_URL,
    eagle_files,
    fetch_url,
    hf_files,
    write_question_files,
)
from specbench.run.tasks import Question, QuestionSelection, available_tasks, questions_from_rows, resolve_questions
from tests.test_cli import bad_input, run_args
from tests.test_distribution import prompt, target  # noqa: F401  (shared fixtures)
from tests.test_tasks_and_report import PAPER_TASKS, synthetic_row


def test_threads_default_to_the_usable_cores_and_to_one_beside_other_work(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert decoding_threads(None, busy=False) == usable_cores()
    assert decoding_threads(None, busy=True) == 1
    assert decoding_threads(3, busy=True) == 3  # --threads wins
    assert decoding_threads(None, busy=False, processes=4, cores=16) == 4  # Ray workers share a cluster's cores
    assert decoding_threads(None, busy=False, processes=4, cores=2) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert decoding_threads(None, busy=True) == 2  # the user's own setting is kept
    line = warning(1.0, 2, "as the run started", threads_note(1))
    assert line.startswith("specbench: warning:") and "decoding with 1 thread per process" in line
    assert "\n" not in line


def test_run_records_the_threads_it_decoded_with(tiny_target_dir, tmp_path):
    before = torch.get_num_threads()
    out = tmp_path / "r"
    try:
        assert main(run_args(tiny_target_dir, out, "--methods", "vanilla", "--tasks", "gsm8k", "--limit", "1",
                             "--temperatures", "0", "--threads", "1")) == 0
    finally:
        torch.set_num_threads(before)
    info = json.loads((out / "run.json").read_text())
    assert info["environment"]["torch_threads"] == 1 and info["load"][-1]["threads"] == 1
    assert "threads" not in info["settings"]  # not a decode setting: a resume may use other threads


def test_bad_threads_is_one_line(tiny_target_dir, tmp_path, capsys):
    assert "--threads must be >= 1" in bad_input(capsys, run_args(tiny_target_dir, tmp_path / "r", "--threads", "0"))
    assert not (tmp_path / "r").exists()


def test_the_step_callback_counts_every_token_and_changes_nothing(target, prompt):  # noqa: F811
    from specbench.methods.pld.drafter import PromptLookupDrafter

    prompts = [prompt, prompt[3:]]
    plain = generate_batch(target, prompts, [PromptLookupDrafter(), PromptLookupDrafter()], Sampling(), 30, set())
    steps: list[int] = []
    seen = generate_batch(target, prompts, [PromptLookupDrafter(), PromptLookupDrafter()], Sampling(), 30, set(),
                          on_step=steps.append)
    assert [g.token_ids for g in seen] == [g.token_ids for g in plain]
    assert [g.accept_lengths for g in seen] == [g.accept_lengths for g in plain]
    assert sum(steps) == sum(len(g.token_ids) for g in seen) == 60
    assert len(steps) == max(len(g.accept_lengths) for g in seen)  # one call per step


class Postfix:
    """Stands in for the questions bar: keeps what is shown on it."""

    def __init__(self) -> None:
        self.shown: list[str] = []

    def set_postfix_str(self, text: str) -> None:
        self.shown.append(text)


def test_token_progress_shows_tokens_of_the_budget_and_their_rate():
    bar = Postfix()
    progress = TokenProgress(bar, every=0.0)  # type: ignore[arg-type]
    job = Job(0.0, "mt_bench", [Question(81, "writing", ["a", "b"])], 0, ["vanilla"])
    step = progress.method("pld", job, 64)
    step(3)
    step(2)
    assert bar.shown[0] == "pld mt_bench question 81: 0/128 tok"  # two turns of 64
    assert bar.shown[-1].startswith("pld mt_bench question 81: 5/128 tok, ") and bar.shown[-1].endswith(" tok/s")


def test_run_shows_progress_inside_a_question_and_reports_next_to_the_run(tiny_target_dir, tmp_path, capsys,
                                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "runs" / "first"
    args = ["run", "--target", str(tiny_target_dir), "--out", str(out), "--methods", "vanilla", "--tasks", "gsm8k",
            "--limit", "1", "--temperatures", "0", "--max-new-tokens", "8"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "vanilla gsm8k question 1: 0/8 tok" in captured.err
    assert (out / "report" / "speedup_T0.md").is_file() and f"tables:  {out / 'report'}" in captured.out
    assert not (tmp_path / "reports").exists()
    assert main(["report", str(out)]) == 0  # `report` alone: the same folder
    assert main(["report", str(out), "--report-dir", str(tmp_path / "elsewhere")]) == 0
    assert (tmp_path / "elsewhere" / "speedup_T0.md").is_file() and not (tmp_path / "reports").exists()


def fake_eagle_repository() -> tuple[dict[str, bytes], dict[str, tuple[str, str]]]:
    """Question-file bytes per EAGLE folder (the last line without a newline, as two of EAGLE's files) and the
    matching table of folders and digests."""
    blobs, table = {}, {}
    for n, (task, (folder, _)) in enumerate(EAGLE_FILES.items()):
        rows = [{"question_id": 10 * n + i, "category": task, "turns": [f"{task} question {i}?"]} for i in range(3)]
        blobs[folder] = "\n".join(json.dumps(r) for r in rows).encode()
        table[task] = (folder, hashlib.sha256(blobs[folder]).hexdigest())
    return blobs, table


def test_eagle_download_writes_what_question_dir_reads(tmp_path):
    blobs, table = fake_eagle_repository()
    asked: list[str] = []

    def fetch(url: str) -> bytes:
        asked.append(url)
        return blobs[url.split("/eagle/data/")[1].split("/")[0]]

    paths = write_question_files(tmp_path / "tasks", eagle_files(fetch, table))
    assert len(paths) == 6 and all(EAGLE_COMMIT in url for url in asked)
    selected = resolve_questions(QuestionSelection(question_dir=tmp_path / "tasks"))
    assert [t.name for t, _ in selected] == PAPER_TASKS
    assert [q.turns for q in dict((t.name, qs) for t, qs in selected)["cnn_dm"]][0] == ["cnn_dm question 0?"]
    # Again into the same folder: identical files are kept; a folder holding other questions is refused.
    write_question_files(tmp_path / "tasks", eagle_files(fetch, table))
    (paths[0]).write_text('{"question_id": 1, "turns": ["mine"]}\n')
    with pytest.raises(SpecbenchError, match="holds other questions"):
        write_question_files(tmp_path / "tasks", eagle_files(fetch, table))


def test_eagle_download_over_http_from_a_local_server(tmp_path):
    """The real fetch (urllib, HTTP, the pinned digests' check, the writes), against a server on the loopback that
    holds the repository's layout: everything but the host is what `tasks download` does."""
    blobs, table = fake_eagle_repository()
    root = tmp_path / "repository"
    for folder, data in blobs.items():
        (root / EAGLE_COMMIT / "eagle" / "data" / folder).mkdir(parents=True)
        (root / EAGLE_COMMIT / "eagle" / "data" / folder / "question.jsonl").write_bytes(data)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *_: None
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        local = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            files = eagle_files(lambda url: fetch_url(url.replace(EAGLE_URL.split("/{commit}")[0], local), timeout=10),
                                table)
        finally:
            server.shutdown()
    paths = write_question_files(tmp_path / "tasks", files)
    assert [p.read_bytes() for p in paths] == [blobs[folder] for folder, _ in table.values()]
    assert len(resolve_questions(QuestionSelection(question_dir=tmp_path / "tasks"))) == 6


def test_eagle_download_refuses_other_bytes_and_writes_nothing(tmp_path):
    blobs, table = fake_eagle_repository()
    with pytest.raises(SpecbenchError, match="not the expected file"):
        write_question_files(tmp_path / "tasks", eagle_files(lambda url: b"changed upstream", table))
    assert not (tmp_path / "tasks").exists()
    assert set(EAGLE_FILES) == set(PAPER_TASKS)  # the pinned table covers the six tasks, no more
    assert all(len(digest) == 64 for _, digest in EAGLE_FILES.values())


def test_hf_download_applies_each_tasks_mapping(tmp_path):
    counts: list[int] = []

    def load(task, count):
        counts.append(count)
        return questions_from_rows([synthetic_row(task.name)] * 2, task.hf, task.name)[:count]

    write_question_files(tmp_path / "tasks", hf_files(1, load))
    assert counts == [1] * 6
    selected = dict((t.name, qs) for t, qs in resolve_questions(QuestionSelection(question_dir=tmp_path / "tasks")))
    assert selected["mt_bench"][0].turns == ["first turn", "second turn"]
    assert selected["gsm8k"][0].turns == ["What is 2 + 3?"] and len(selected["gsm8k"]) == 1
    assert available_tasks()["gsm8k"].question_file == "gsm8k/question.jsonl"


def test_download_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(SpecbenchError, match="cannot download http://127.0.0.1:9/"):
        fetch_url("http://127.0.0.1:9/question.jsonl", timeout=5)  # nothing listens there
    assert "--limit goes with --from hf" in bad_input(capsys, ["tasks", "download", str(tmp_path), "--limit", "3"])
