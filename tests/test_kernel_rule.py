"""The few-token kernels' rule is measured once per machine and stored: later loads, runs and drafters use the stored
rule, a kernel beats F.linear only by more than the margin, and the run records its rule and where it came from."""
from __future__ import annotations

import json

import torch

from specbench.decode.names import FIXED_RULE, ROW_COUNTS, KernelRule, Runtime
from specbench.decode.runtime import FewTokenLinear
from specbench.decode.target import load_model
from specbench.run.kernel_rule import MARGIN, choose, load_target, measure_rule, rule_path
from specbench.run.kernel_store import describe, read_rule, store_rule

FEW_TOKEN = Runtime(kernels="few-token", graphs="off")


def test_a_kernel_replaces_f_linear_only_beyond_the_margin():
    assert choose({"wxt": 1.0, "packed": 1.2, "linear": 1.0 + MARGIN / 2}) == "linear"
    assert choose({"wxt": 1.0, "packed": 1.2, "linear": 1.0 + 2 * MARGIN}) == "wxt"
    assert choose({"pair": 2.0, "wxt": 3.0, "linear": 1.0}) == "linear"
    assert describe(FIXED_RULE) == "1 pair, 2-4 wxt, 5-32 packed"
    assert describe(KernelRule(("linear", "linear", "packed", "linear", "linear", "linear"))) == \
        "1-2 linear, 3-4 packed, 5-32 linear"


def test_measured_rule_names_a_timed_kernel_for_every_row_count(tiny_target_dir):
    model = load_model(str(tiny_target_dir), runtime=FEW_TOKEN).model
    rule, table = measure_rule(model, rounds=1)
    assert len(rule.kernels) == len(ROW_COUNTS)
    for i, (rows, kernel) in enumerate(zip(ROW_COUNTS, rule.kernels)):
        assert table[kernel][i] is not None and table["linear"][i] is not None, (rows, kernel)
        assert kernel != "pair" or rows == 1
        assert table[kernel][i] * (1 + MARGIN) < table["linear"][i] or kernel == "linear"
    assert table["pair"][1:] == [None] * (len(ROW_COUNTS) - 1)


def test_the_stored_rule_is_what_every_later_load_decodes_on(tiny_target_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    first = load_target(str(tiny_target_dir), runtime=FEW_TOKEN)
    path = rule_path(first.model)
    assert path.is_relative_to(tmp_path) and read_rule(path) is not None
    assert first.runtime.rule == read_rule(path)[0] and str(path) in first.runtime.rule_source
    # A stored rule (here one no measurement would pick) is taken as it is, by the target and by its drafters.
    chosen = KernelRule(("wxt", "wxt", "linear", "linear", "wxt", "wxt"))
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "rule": list(chosen.kernels)}))
    again = load_target(str(tiny_target_dir), runtime=FEW_TOKEN)
    swapped = [m for m in again.model.modules() if isinstance(m, FewTokenLinear)]
    assert again.runtime.rule == chosen and {m.rule for m in swapped} == {chosen}
    assert again.runtime.packed_linears == 0 and all(m.packed is None for m in swapped)  # no packed kernel: freed
    ids = torch.randint(0, 300, (1, 12))
    with torch.inference_mode():
        expected = load_target(str(tiny_target_dir), runtime="stock").model(ids).logits
        torch.testing.assert_close(again.model(ids).logits, expected, rtol=1e-4, atol=1e-4)
    # Stock kernels take no rule; a process that stores second decodes on the first one's rule.
    assert load_target(str(tiny_target_dir), runtime="stock").runtime.swapped_linears == 0
    assert store_rule(path, {**record, "rule": ["linear"] * len(ROW_COUNTS)})[0] == chosen
    # A cache that cannot be written: the rule serves this load, and its source says it was not stored.
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    rule, source = store_rule(blocked / "rule.json", {**record, "rule": ["linear"] * len(ROW_COUNTS)})
    assert rule == KernelRule(("linear",) * len(ROW_COUNTS)) and "not stored" in source


def test_a_run_records_its_rule_and_where_it_came_from(tiny_target_dir, tmp_path, monkeypatch, capsys):
    from specbench.cli import main

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    assert main(["run", "--target", str(tiny_target_dir), "--out", str(out), "--methods", "vanilla", "--tasks",
                 "gsm8k", "--limit", "1", "--max-new-tokens", "4", "--kernels", "few-token",
                 "--report-dir", str(out / "report")]) == 0
    environment = json.loads((out / "run.json").read_text())["environment"]
    stored = list((tmp_path / "cache" / "kernels").glob("*.json"))
    assert len(stored) == 1 and str(stored[0]) in environment["kernel_rule_source"]
    assert environment["kernel_rule"] == describe(read_rule(stored[0])[0])
    capsys.readouterr()
    assert main(["costs", "show"]) == 0  # lists the stored rule beside the stored costs
    assert f"{stored[0]}: kernel rule {environment['kernel_rule']}" in capsys.readouterr().out
