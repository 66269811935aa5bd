"""scripts/paired_tau.py: pairs turns by question, computes the mean difference and its interval, refuses bad input."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _record(method: str, question: int, accept_lengths: list[list[int]], temperature: float = 0.0) -> dict:
    return {"method": method, "task": "gsm8k", "temperature": temperature, "question_id": question, "repeat": 0,
            "choices": [{"accept_lengths": accept_lengths}]}


def _paired(run: Path, *methods: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "paired_tau.py"), str(run), *methods],
                          capture_output=True, text=True, cwd=ROOT)


def test_paired_difference_and_interval(tmp_path: Path) -> None:
    # Per-turn τ of a: 2, 3, 2.5; of b: 1, 1, 1.5 -> differences 1, 2, 1: mean 1.333, sd 0.577, t(0.975, 2) 4.303.
    records = [
        _record("a", 1, [[2, 2], [3]]), _record("b", 1, [[1, 1], [1]]),
        _record("a", 2, [[2, 3]]), _record("b", 2, [[1, 2]]),
        _record("a", 3, [[9]], temperature=1.0),  # another temperature: not paired at T=0
    ]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    done = _paired(tmp_path, "a", "b")
    assert done.returncode == 0, done.stderr
    assert "a - b: +1.333 ± 1.434 (95%, 3 paired turns)" in done.stdout


@pytest.mark.parametrize("methods", [("a",), ("a", "missing")])
def test_paired_refuses_odd_or_unpaired(tmp_path: Path, methods: tuple[str, ...]) -> None:
    (tmp_path / "records.jsonl").write_text(json.dumps(_record("a", 1, [[2]])) + "\n")
    done = _paired(tmp_path, *methods)
    assert done.returncode != 0
    assert done.stderr.strip().startswith("paired_tau:")
