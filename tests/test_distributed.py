"""`run --workers 2` on a local Ray cluster of two CPU workers and a tiny model: the same records as one process,
nothing lost when a worker is killed mid-run, and resume."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'specbench[distributed]')")

from specbench.cli import main  # noqa: E402
from specbench.run.distributed import NAMESPACE, worker_name  # noqa: E402
from specbench.run.record import Record  # noqa: E402
from specbench.run.records import read_records  # noqa: E402

METHODS = "vanilla,pld,lookahead"


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def run(target: Path, out: Path, *extra: str) -> int:
    return main(["run", "--target", str(target), "--out", str(out), "--report-dir", str(out / "report"),
                 "--methods", METHODS, "--tasks", "mt_bench,gsm8k", "--temperatures", "0,1",
                 "--max-new-tokens", "16", *extra])


def decoded(out: Path) -> dict[tuple, tuple]:
    return {r.key(): (r.choice.token_ids, r.choice.accept_lengths) for r in read_records(out)}


@pytest.fixture(scope="module")
def single(tiny_target_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("single") / "run"
    assert run(tiny_target_dir, out, "--limit", "4") == 0
    return out


def test_two_workers_decode_what_one_process_decodes(cluster, single, tiny_target_dir, tmp_path):
    out = tmp_path / "two"
    # the same fixed costs as the single run, so that cost-based choices match too
    assert run(tiny_target_dir, out, "--limit", "4", "--workers", "2", "--cost-curve", str(single / "run.json")) == 0
    assert decoded(out) == decoded(single)
    records = read_records(out)
    assert {r.worker.id for r in records} == {0, 1}  # both workers decoded
    assert all(r.worker.host and r.worker.device.startswith("cpu") for r in records)
    info = json.loads((out / "run.json").read_text())
    assert [w["worker"] for w in info["workers"]] == [0, 1]
    # every question's methods ran on one worker: the speedups stay paired on one device
    by_question: dict[tuple, set] = {}
    for r in records:
        by_question.setdefault((r.task, r.temperature, r.question_id), set()).add(r.worker.id)
    assert all(len(workers) == 1 for workers in by_question.values())


def test_a_killed_worker_loses_nothing_and_resume_adds_only_what_is_missing(cluster, single, tiny_target_dir,
                                                                           tmp_path):
    out = tmp_path / "killed"
    args = ("--limit", "4", "--workers", "2", "--cost-curve", str(single / "run.json"))
    result: dict[str, int] = {}
    thread = threading.Thread(target=lambda: result.setdefault("code", run(tiny_target_dir, out, *args)))
    thread.start()
    deadline = time.time() + 300
    while time.time() < deadline and not ((out / "records.jsonl").is_file() and
                                           len((out / "records.jsonl").read_text().splitlines()) >= 3):
        time.sleep(0.2)
    ray.kill(ray.get_actor(worker_name(0), namespace=NAMESPACE))
    thread.join(timeout=600)
    assert result.get("code") == 0
    killed = read_records(out)
    assert decoded(out) == decoded(single)  # every question decoded, none twice, the same tokens
    assert len(killed) == len(decoded(out))
    assert killed[-1].worker.id == 1  # the survivor finished the run
    # resume with more questions: finished lines untouched, only the new questions decoded
    before = (out / "records.jsonl").read_bytes()
    assert run(tiny_target_dir, out, "--limit", "5", "--workers", "2") == 0
    after = (out / "records.jsonl").read_bytes()
    assert after.startswith(before)
    new = [Record.from_json(json.loads(line), "new line") for line in after[len(before):].decode().splitlines()]
    assert new and {r.key() for r in new}.isdisjoint({r.key() for r in killed})
    assert {str(r.question_id) for r in new} == {"5"}  # the fifth question of each task, nothing else
