"""Roofline, energy and goodput: the bytes a forward must read on a tiny config by hand, the energy counters on a fake
powercap folder, goodput by hand on recorded turns, and a run whose report carries them."""
from __future__ import annotations

import json

import pytest
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from specbench.analysis.efficiency import efficiency_frame, efficiency_table, forward_contexts
from specbench.analysis.goodput import goodput_frame, goodput_table
from specbench.analysis.verify import verify_report
from specbench.cli import main
from specbench.run.energy import RaplCounter
from specbench.run.footprint import KvGroup, TargetBytes, target_bytes
from specbench.run.record import BatchPlace, Choice, Record
from tests.conftest import tiny_llama


def test_a_tiny_llamas_bytes_by_hand():
    # vocab 50, hidden 32 (4 heads of 8), 2 kv heads, intermediate 64, 2 layers, untied head, fp32.
    per_layer = 32 * 32 * 2 + 2 * (32 * 16) + 3 * 32 * 64 + 2 * 32  # q, o; k, v; gate, up, down; two norms
    params = 50 * 32 * 2 + 2 * per_layer + 32  # embedding and head; layers; final norm
    facts = target_bytes(tiny_llama(50, seed=0))
    assert facts.weights == 4 * params
    assert facts.kv == (KvGroup(2, 2 * 2 * 8 * 4),)  # keys and values: 2 x 2 kv heads x head_dim 8 x 4 bytes
    # A forward of two rows at contexts 10 and 3: the weights once, each row's cache in every layer.
    assert facts.forward_bytes([10, 3]) == 4 * params + 2 * 128 * 13


def test_sliding_layers_read_at_most_their_window():
    config = Gemma3TextConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=8, sliding_window=4,
                              layer_types=["sliding_attention", "sliding_attention", "full_attention"])
    facts = target_bytes(Gemma3ForCausalLM(config))
    assert facts.kv == (KvGroup(1, 2 * 8 * 4), KvGroup(2, 2 * 8 * 4, 4))
    assert facts.forward_bytes([10]) == facts.weights + 64 * 10 + 2 * 64 * 4
    assert TargetBytes.from_dict(facts.to_dict()) == facts and TargetBytes.from_dict({"weights": 1}) is None


def _record(method: str, accept: list[int], prompt: int, verify: float, prefill: float, ends: list[float],
            energy: float | None = None, question: int = 1, batch: BatchPlace | None = None,
            batch_wall: float | None = None) -> Record:
    choice = Choice(new_tokens=[sum(accept)], wall_time=[ends[-1]], accept_lengths=[accept],
                    decoding_steps=[len(accept)], verify_time=[verify], prefill_time=[prefill], prompt_tokens=[prompt],
                    step_ends=[ends], energy_j=None if energy is None else [energy],
                    batch_wall_time=None if batch_wall is None else [batch_wall])
    return Record(method=method, task="gsm8k", temperature=0.0, question_id=question, choice=choice,
                  batch_size=batch.size if batch else 1, batch=batch)


def test_the_roofline_and_energy_by_hand():
    assert forward_contexts(10, [1, 3, 2]) == [10, 13]  # step 0 is the prefill
    facts = TargetBytes(1000, (KvGroup(2, 5),))
    # vanilla: 3 forwards after the prefill at contexts 10, 11, 12; 0.1 s of verification of which 0.04 s prefill.
    # eagle: 2 at 10 and 13; 0.05 s, 0.01 s prefill. Energy 2.0 J over 4 tokens and 1.5 J over 6.
    records = [_record("vanilla", [1, 1, 1, 1], 10, 0.1, 0.04, [0.1, 0.2, 0.3, 0.4], 2.0),
               _record("eagle", [1, 3, 2], 10, 0.05, 0.01, [0.1, 0.2, 0.3], 1.5)]
    table = efficiency_table(efficiency_frame(records, facts), copy_gbps=1e-6)
    vanilla_bytes, eagle_bytes = 3 * 1000 + 10 * (10 + 11 + 12), 2 * 1000 + 10 * (10 + 13)
    assert table.loc["vanilla", "decode forwards"] == 3 and table.loc["eagle", "decode forwards"] == 2
    assert table.loc["vanilla", "MB/forward"] == pytest.approx(vanilla_bytes / 3 / 1e6)
    assert table.loc["vanilla", "ms/forward"] == pytest.approx(60 / 3)
    assert table.loc["eagle", "GB/s"] == pytest.approx(eagle_bytes / 0.04 / 1e9)
    assert table.loc["eagle", "% of copy"] == pytest.approx(100 * eagle_bytes / 0.04 / 1e9 / 1e-6)
    assert table.loc["vanilla", "J/token"] == pytest.approx(0.5) and table.loc["eagle", "J/token"] == pytest.approx(0.25)
    # A batch of two rows: a forward reads the weights once and the cache of every row still decoding.
    batch = [_record("vanilla", [1, 1, 1], 10, 0.03, 0.01, [0.1, 0.2, 0.3], 3.0, 1, BatchPlace(0, 2), 0.3),
             _record("vanilla", [1, 1], 4, 0.02, 0.01, [0.1, 0.2], 3.0, 2, BatchPlace(0, 2), 0.3)]
    frame = efficiency_frame(batch, facts)
    assert frame["bytes"].tolist() == [1000 + 10 * (10 + 4) + 1000 + 10 * 11]
    assert frame["seconds"].tolist() == [pytest.approx(0.02)] and frame["joules"].tolist() == [3.0]
    # Records without prompt lengths (before schema 4) give nothing; a run without the target's sizes no bytes.
    old = Record(method="vanilla", task="gsm8k", temperature=0.0, question_id=1,
                 choice=Choice(new_tokens=[2], accept_lengths=[[1, 1]], verify_time=[0.1]))
    assert efficiency_frame([old], facts).empty
    assert efficiency_table(efficiency_frame(records, None), None).isna().loc["vanilla"].tolist() == \
        [False, True, False, True, True, False]


def test_goodput_by_hand_at_batch_size_two():
    # Two rows of one batch (wall 0.5 s): row 1's TPOT = (0.4 - 0.1) / 3 = 100 ms, row 2's = (0.2 - 0.1) / 2 = 50 ms.
    rows = [_record("pld", [1, 1, 1, 1], 5, 0.1, 0.0, [0.1, 0.2, 0.3, 0.4], None, 1, BatchPlace(0, 2), 0.5),
            _record("pld", [1, 2], 5, 0.1, 0.0, [0.1, 0.2], None, 2, BatchPlace(0, 2), 0.5)]
    table = goodput_table(goodput_frame(rows, slo_s=0.075))
    assert table.loc[("pld", "gsm8k"), "turns"] == 2 and table.loc[("pld", "gsm8k"), "met SLO %"] == 50.0
    assert table.loc[("pld", "all"), "tokens/s"] == pytest.approx(7 / 0.5)
    assert table.loc[("pld", "all"), "goodput tokens/s"] == pytest.approx(3 / 0.5)
    assert goodput_table(goodput_frame(rows, slo_s=0.1)).loc[("pld", "all"), "met SLO %"] == 100.0


def test_rapl_counter_on_a_fake_powercap_folder(tmp_path):
    assert RaplCounter.find(tmp_path / "absent") == f"no readable RAPL counter: {tmp_path / 'absent'} absent"
    package, core = tmp_path / "intel-rapl:0", tmp_path / "intel-rapl:0:0"
    for zone, energy in ((package, 900), (core, 5)):
        zone.mkdir()
        (zone / "energy_uj").write_text(f"{energy}\n")
        (zone / "max_energy_range_uj").write_text("1000\n")
    counter = RaplCounter.find(tmp_path)
    assert counter.name == "RAPL (intel-rapl:0)"  # the core subzone is inside the package: not counted twice
    start = counter.read()
    (package / "energy_uj").write_text("100\n")  # wrapped past 1000 µJ
    assert counter.joules(start, counter.read()) == pytest.approx(200 / 1e6)
    (package / "energy_uj").chmod(0)
    (package / "max_energy_range_uj").write_text("x")
    assert "no readable RAPL counter under" in RaplCounter.find(tmp_path)


def test_a_run_reports_its_roofline_energy_and_goodput(tiny_target_dir, tmp_path):
    out = tmp_path / "r"
    assert main(["run", "--target", str(tiny_target_dir), "--out", str(out), "--max-new-tokens", "8",
                 "--methods", "vanilla,pld", "--tasks", "gsm8k", "--limit", "2", "--temperatures", "0",
                 "--batch-size", "2"]) == 0
    assert "GB/s" in (out / "report" / "efficiency_T0_B2.md").read_text()  # every report has it
    info = json.loads((out / "run.json").read_text())
    assert info["environment"]["target_bytes"]["weights"] > 0 and info["costs"]["copy_gbps"] > 0
    assert "energy_counter" in info["environment"] or "energy_unavailable" in info["environment"]
    choice = json.loads((out / "records.jsonl").read_text().splitlines()[0])["choices"][0]
    assert choice["prompt_tokens"][0] > 0 and 0 < choice["prefill_time"][0] <= choice["verify_time"][0]
    report = tmp_path / "report"
    assert main(["report", str(out), "--out", str(report), "--no-plots", "--slo-tpot-ms", "1000"]) == 0
    table = (report / "efficiency_T0_B2.md").read_text()
    assert "% of copy" in table and "J/token" in table and "Copy bandwidth of this device" in table
    row = next(line for line in table.splitlines() if line.startswith("| vanilla"))
    assert row.split("|")[3].strip() != "n/a"  # MB/forward
    assert "| pld " in (report / "goodput_T0_B2.md").read_text()
    made_from = json.loads((report / "made_from.json").read_text())
    assert made_from["options"] == ["--slo-tpot-ms", "1000"]
    assert verify_report(report) == []  # remade with the same bound
    assert main(["report", str(out), "--out", str(tmp_path / "bad"), "--slo-tpot-ms", "0"]) == 2


def test_the_new_fields_round_trip_and_older_records_read_without_them():
    record = _record("vanilla", [1, 2], 7, 0.1, 0.05, [0.1, 0.2], energy=1.25)
    back = Record.from_json(record.to_json(), "test")
    assert back.choice.energy_j == [1.25] and back.choice.prompt_tokens == [7] and back.choice.prefill_time == [0.05]
    raw = {**record.to_json(), "schema": 3}
    for key in ("prompt_tokens", "prefill_time", "energy_j"):
        del raw["choices"][0][key]
    old = Record.from_json(raw, "test")
    assert old.choice.energy_j is None and old.choice.prompt_tokens == [] and old.choice.prefill_time == []
