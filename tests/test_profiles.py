"""Acceptance profiles (specbench.analysis.profiles): `report` writes each drafting method's speculation_profile.json
(the schema of NVIDIA Model-Optimizer's specdec_bench) with numbers that are the records' own; `run
--synthetic-acceptance FILE` replays a profile, per category where it has the question's, and the replayed run's
per-position acceptance matches the profile within binomial intervals; a bad profile is one error line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbench.analysis.profiles import build_profile, read_replay_rates
from specbench.cli import main
from specbench.errors import SpecbenchError
from specbench.run.record import Choice, Record
from specbench.run.records import read_records
from specbench.run.run_info import RunInfo
from specbench.run.synthetic import SyntheticAcceptance
from tests.test_cli import bad_input, run_args
from tests.test_synthetic import assert_rates, conditional_counts

DEEP_CHAIN = Path(__file__).parent / "plugin" / "deep_chain_method.py"
SCHEMA_FIELDS = {"schema_version", "measured", "method", "draft_checkpoint", "target_model", "num_speculative_tokens",
                 "block_size", "max_supported_k", "verification_method", "conditional_accept_rates",
                 "marginal_accept_rates", "mean_accept_length", "accept_length_model", "accept_length_by_k",
                 "acceptance_length_histogram", "per_category", "measurement_conditions", "validation"}


def record(category: str, question_id: int, turns: list[list[int]]) -> Record:
    return Record("eagle@head=x", "gsm8k" if category == "math" else "alpaca", 0.0, question_id,
                  Choice(accept_lengths=turns, new_tokens=[sum(t) for t in turns],
                         decoding_steps=[len(t) for t in turns]), category=category)


def test_profile_from_records_has_the_schemas_fields_and_the_records_numbers():
    records = [record("math", 1, [[1, 2, 3, 1], [4, 1]]), record("", 2, [[1, 1, 2, 1]])]
    profile = build_profile(records, RunInfo(started="then"))
    assert SCHEMA_FIELDS <= set(profile) and profile["schema_version"] == "1.0" and profile["method"] == "eagle"
    # 10 steps: lengths 1 x6, 2 x2, 3 x1, 4 x1; the deepest acceptance is 3 drafted tokens
    assert profile["acceptance_length_histogram"] == {"1": 6, "2": 2, "3": 1, "4": 1}
    assert profile["num_speculative_tokens"] == 3
    assert profile["marginal_accept_rates"] == pytest.approx([0.4, 0.2, 0.1])
    assert profile["conditional_accept_rates"] == pytest.approx([0.4, 0.5, 0.5])
    assert profile["mean_accept_length"] == pytest.approx(17 / 10)  # tokens / steps: the report's τ
    assert profile["validation"]["mean_consistency"]["passed"]
    assert set(profile["per_category"]) == {"math", "alpaca"}  # no category: the task's name
    math = profile["per_category"]["math"]
    assert math["steps"] == 6 and math["marginal_accept_rates"] == pytest.approx([3 / 6, 2 / 6, 1 / 6], abs=1e-6)
    assert profile["per_category"]["alpaca"]["conditional_accept_rates"] == pytest.approx([0.25, 0.0, 0.0])


def test_report_writes_a_profile_per_drafting_method_from_its_records(tiny_target_dir, tmp_path):
    out = tmp_path / "r"
    assert main(run_args(tiny_target_dir, out, "--methods", "vanilla,pld", "--tasks", "gsm8k,mt_bench", "--limit",
                         "2", "--temperatures", "0")) == 0
    profiles = sorted((out / "report" / "profiles").iterdir())
    assert [p.name for p in profiles] == ["speculation_profile_pld_T0.json"]  # vanilla drafts nothing
    profile = json.loads(profiles[0].read_text())
    pld = [r for r in read_records(out) if r.method == "pld"]
    steps = sum(sum(r.choice.decoding_steps) for r in pld)
    assert sum(profile["acceptance_length_histogram"].values()) == steps == profile["measurement_conditions"]["steps"]
    assert profile["mean_accept_length"] == pytest.approx(sum(sum(r.choice.new_tokens) for r in pld) / steps,
                                                          abs=1e-6)
    assert sum(e["steps"] for e in profile["per_category"].values()) == steps
    replay = read_replay_rates(profiles[0])  # what report writes, run replays
    assert replay.overall == [*profile["conditional_accept_rates"], 0.0]


def drafted_accepted(turns: list[list[int]]) -> list[int]:
    """Drafted tokens accepted per step, leaving out each turn's first step (the prompt's forward) and last two
    (drafts cut to the remaining budget): every other step drafted DeepChain's full chain."""
    return [a - 1 for turn in turns for a in turn[1:-2]]


def test_a_replayed_profile_is_accepted_at_its_rates_per_category(tiny_target_dir, tmp_path, capsys):
    profile = {"schema_version": "1.0", "measured": True, "num_speculative_tokens": 3,
               "conditional_accept_rates": [0.8, 0.6, 0.5],
               "per_category": {"math": {"conditional_accept_rates": [0.4, 0.9]}, "writing": {"mean_accept_length": 2}}}
    path = tmp_path / "speculation_profile.json"
    path.write_text(json.dumps(profile))
    out = tmp_path / "r"
    code = main(["run", "--target", str(tiny_target_dir), "--method-file", str(DEEP_CHAIN), "--methods", "deepchain",
                 "--no-baseline", "--tasks", "gsm8k,alpaca", "--limit", "6", "--temperatures", "0",
                 "--max-new-tokens", "160", "--seed", "3", "--synthetic-acceptance", str(path), "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    records = read_records(out)
    by_category: dict[str, list[list[int]]] = {}
    for r in records:
        by_category.setdefault(r.task_category, []).extend(r.choice.accept_lengths)
        assert r.synthetic == ([0.4, 0.9, 0.0] if r.task_category == "math" else [0.8, 0.6, 0.5, 0.0])
    assert set(by_category) == {"math", "instruction"}
    expected = {"math": [0.4, 0.9, 0.0], "instruction": [0.8, 0.6, 0.5, 0.0]}  # then 0: nothing deeper was measured
    for category, rates in expected.items():
        accepted = drafted_accepted(by_category[category])
        counts = conditional_counts(accepted, [len(rates)] * len(accepted), len(rates))
        assert min(n for n, _ in counts) > 60, (category, counts)
        assert_rates(counts, SyntheticAcceptance(tuple(rates)))
    assert "TIMING-ONLY" in (out / "report" / "speedup_T0.md").read_text()
    # the run's profile is the replayed one, measured back (report writes it from the synthetic run's records)
    written = json.loads((out / "report" / "profiles" / "speculation_profile_deepchain_T0.json").read_text())
    assert written["num_speculative_tokens"] == 3 and "TIMING-ONLY" in written["measurement_conditions"]["timing_only"]


@pytest.mark.parametrize("content, why", [
    ("{not json", "not a speculation profile"),
    (json.dumps({"schema_version": "1.0", "conditional_accept_rates": [0.5, 1.5]}), "not a rate"),
    (json.dumps({"schema_version": "1.0", "marginal_accept_rates": [0.5]}), "conditional_accept_rates"),
    (json.dumps({"schema_version": "2.0", "conditional_accept_rates": [0.5]}), "schema_version"),
    (json.dumps({"schema_version": "1.0", "measured": False, "conditional_accept_rates": [0.0]}), "measured"),
    (json.dumps({"schema_version": "1.0", "conditional_accept_rates": [0.5],
                 "per_category": {"math": {"conditional_accept_rates": "high"}}}), "per_category.math"),
])
def test_a_bad_profile_is_one_error_line_and_a_non_zero_exit(tiny_target_dir, tmp_path, capsys, content, why):
    path = tmp_path / "bad.json"
    path.write_text(content)
    error = bad_input(capsys, run_args(tiny_target_dir, tmp_path / "r", "--synthetic-acceptance", str(path)))
    assert why in error and str(path) in error, error
    assert not (tmp_path / "r" / "records.jsonl").exists()
    with pytest.raises(SpecbenchError):
        read_replay_rates(tmp_path / "absent.json")


def test_a_profile_with_categories_refuses_batches_that_mix_them(tiny_target_dir, tmp_path, capsys):
    """mt_bench's sample mixes categories: a batch is verified at one set of rates, so replaying per category at
    batch size 2 is refused in one line (gsm8k's questions are all math: allowed)."""
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"schema_version": "1.0", "conditional_accept_rates": [0.5],
                                "per_category": {"writing": {"conditional_accept_rates": [0.9]}}}))
    error = bad_input(capsys, run_args(tiny_target_dir, tmp_path / "r", "--tasks", "mt_bench", "--batch-size", "2",
                                       "--synthetic-acceptance", str(path)))
    assert "--batch-size 1" in error and "mt_bench" in error, error
    assert main(run_args(tiny_target_dir, tmp_path / "ok", "--tasks", "gsm8k", "--limit", "2", "--batch-size", "2",
                         "--methods", "pld", "--temperatures", "0", "--synthetic-acceptance", str(path))) == 0
