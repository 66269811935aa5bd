"""Per-token latency from the records' step times: TTFT, TPOT and ITL by hand on a recorded turn, percentiles as
defined, and a run that records them and reports them."""
from __future__ import annotations

import json

import pytest

from specbench.analysis.latency import latency_samples, latency_table, turn_latency
from specbench.cli import main
from specbench.run.record import Choice, Record


def test_a_turns_latency_by_hand():
    # Three steps ending at 0.30 s (prefill and first token), 0.35 s (three tokens) and 0.45 s (two tokens).
    out = turn_latency([0.30, 0.35, 0.45], [1, 3, 2])
    assert out["TTFT"] == [0.30]
    assert out["TPOT"] == [pytest.approx((0.45 - 0.30) / 5)]
    assert out["ITL"] == pytest.approx([0.05, 0.0, 0.0, 0.10, 0.0])
    assert turn_latency([0.2], [1]) == {"TTFT": [0.2], "TPOT": [], "ITL": []}


def test_percentiles_over_a_methods_turns():
    turns = Choice(step_ends=[[0.30, 0.35, 0.45]], accept_lengths=[[1, 3, 2]])
    record = Record(method="m", task="gsm8k", temperature=0.0, question_id=1, choice=turns)
    table = latency_table(latency_samples([record]))
    # ITL sorted: 0, 0, 0, 50, 100 ms: the median is 0; p95 at rank 0.95 x 4 = 3.8, between 50 and 100 ms.
    assert table.loc["m", ("ITL", "p50 ms")] == pytest.approx(0.0)
    assert table.loc["m", ("ITL", "p95 ms")] == pytest.approx(90.0)
    assert table.loc["m", ("TTFT", "p99 ms")] == pytest.approx(300.0)
    assert table.loc["m", ("TPOT", "p50 ms")] == pytest.approx(30.0)


def test_a_run_records_step_times_and_reports_latency(tiny_target_dir, tmp_path):
    out = tmp_path / "r"
    assert main(["run", "--target", str(tiny_target_dir), "--out", str(out), "--max-new-tokens", "12",
                 "--methods", "vanilla,pld", "--tasks", "mt_bench", "--limit", "1", "--temperatures", "0"]) == 0
    for line in (out / "records.jsonl").read_text().splitlines():
        choice = json.loads(line)["choices"][0]
        for ends, steps, wall in zip(choice["step_ends"], choice["decoding_steps"], choice["wall_time"]):
            assert len(ends) == steps and ends == sorted(ends) and 0 < ends[-1] <= wall + 1e-6
    report = out / "report"
    assert "TTFT p50 ms" in (report / "latency_T0.md").read_text()
    assert (report / "latency_cdf_T0.png").is_file() and "\\toprule" in (report / "latency_T0.tex").read_text()
