"""Reference rows (run --reference): transformers' generate on the run's target, eager and compiled (static cache +
torch.compile, compiled once here on the tiny model), recorded like a method, identical to vanilla where it must be,
and in the report as the extra speedup column over hf-compiled."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from torch._dynamo.utils import counters

from specbench.analysis.tables import leaderboard, raw_speedup_table, with_reference_column
from specbench.cli import main
from specbench.decode.sampling import Sampling
from specbench.decode.target import load_model
from specbench.measure.check import check_run
from specbench.run.reference import ReferenceDecoder
from specbench.run.tasks import Question
from tests.test_cli import run_args

REFERENCES = ("hf-compiled", "hf-eager")


@pytest.fixture(scope="module")
def reference_run(tiny_target_dir, tmp_path_factory) -> tuple[Path, int]:
    """vanilla with both reference rows, T=0 and T=1, one question of a two-turn and a one-turn task; and how many
    graphs torch.compile captured meanwhile (the run is in this process)."""
    out = tmp_path_factory.mktemp("reference") / "run"
    graphs = counters["stats"]["unique_graphs"]
    code = main(run_args(tiny_target_dir, out, "--methods", "vanilla", "--reference", ",".join(REFERENCES),
                         "--tasks", "mt_bench,gsm8k", "--limit", "1", "--temperatures", "0,1"))
    assert code == 0
    return out, counters["stats"]["unique_graphs"] - graphs


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def test_reference_rows_are_recorded_like_methods(reference_run):
    out, graphs = reference_run
    rows = records(out)
    assert sorted({r["method"] for r in rows}) == ["hf-compiled", "hf-eager", "vanilla"]
    assert graphs > 0  # hf-compiled's forward went through torch.compile
    for r in rows:
        if r["method"] not in REFERENCES:
            continue
        choice = r["choices"][0]
        assert len(choice["token_ids"]) == (2 if r["task"] == "mt_bench" else 1)
        for turn, tokens in enumerate(choice["token_ids"]):
            assert 0 < len(tokens) == choice["new_tokens"][turn] == choice["decoding_steps"][turn]
            assert choice["accept_lengths"][turn] == [1] * len(tokens)
            ends = choice["step_ends"][turn]
            assert len(ends) == len(tokens) and ends == sorted(ends) and 0 < ends[-1] <= choice["wall_time"][turn]
            assert choice["stop_reason"][turn] in ("eos", "length")
            assert choice["draft_time"][turn] == 0.0
            assert choice["prompt_tokens"][turn] > 0 and choice["prefill_time"][turn] == ends[0]
        vanilla = next(v["choices"][0] for v in rows if v["method"] == "vanilla" and v["task"] == r["task"]
                       and v["temperature"] == r["temperature"])
        assert choice["prompt_tokens"] == vanilla["prompt_tokens"]  # the same conversation, the same tokens
        assert r["options"]["modules"].startswith("transformers' own")
        assert r["options"]["cache"] == ("static" if r["method"] == "hf-compiled" else "dynamic")
    options = json.loads((out / "run.json").read_text())["method_options"]
    assert options["hf-compiled"]["compile"].startswith("torch.compile")
    assert "cache_slots" in next(r for r in rows if r["method"] == "hf-compiled")["options"]


def test_reference_rows_emit_vanillas_tokens(reference_run):
    """Greedy fp32: the same argmax as vanilla at every step. T=1: the same distribution and the same per-turn seed
    drawn once per token, so the same draws on this model (a near-boundary draw could differ; none here)."""
    out, _ = reference_run
    rows = records(out)
    vanilla = {(r["task"], r["temperature"]): r["choices"][0]["token_ids"] for r in rows if r["method"] == "vanilla"}
    for r in rows:
        if r["method"] in REFERENCES:
            assert r["choices"][0]["token_ids"] == vanilla[(r["task"], r["temperature"])], (r["method"], r["task"])
    assert vanilla[("mt_bench", 0.0)] != vanilla[("mt_bench", 1.0)]  # T=1 sampled
    summary, ok = check_run(out, margins=False)
    assert ok and "hf-compiled          reference identical to vanilla in 3/3 turns  OK" in summary


def test_report_gives_the_speedup_over_hf_compiled(reference_run):
    out, _ = reference_run
    board = pd.read_csv(out / "report" / "leaderboard_T0.csv", comment="#", index_col="method")
    rows = [r for r in records(out) if r["temperature"] == 0.0]

    def rate(method: str) -> float:
        mine = [r["choices"][0] for r in rows if r["method"] == method]
        return sum(map(sum, (c["new_tokens"] for c in mine))) / sum(map(sum, (c["wall_time"] for c in mine)))

    for method in ("vanilla", "hf-eager", "hf-compiled"):
        expected = rate(method) / rate("hf-compiled")
        assert board.loc[method, "overall_speedup_vs_hf_compiled"] == pytest.approx(expected, abs=2e-3)
    assert "Speedup vs hf-compiled" in (out / "report" / "leaderboard_T0.md").read_text()
    efficiency = (out / "report" / "efficiency_T0.md").read_text()
    assert all(f"| {name} " in efficiency for name in REFERENCES)  # a roofline row (prefill times recorded)
    assert (out / "report" / "speedup_vs_hf_compiled_T0.md").is_file()
    assert "hf-compiled" not in pd.read_csv(out / "report" / "speedup_T0.csv", comment="#").columns.str.cat()


def test_speedup_over_a_reference_row():
    frame = pd.DataFrame({"method": ["vanilla", "hf-compiled", "m"], "task": "Overall", "new_tokens": [10, 20, 15],
                          "wall_time": 1.0, "steps": [10, 20, 5], "question_id": "1"})
    versus = raw_speedup_table(frame, baseline="hf-compiled")
    assert versus[("Overall", "Speedup")].to_dict() == {"hf-compiled": 1.0, "m": 0.75, "vanilla": 0.5}
    board, _ = leaderboard(raw_speedup_table(frame), None)
    assert board[("Overall", "Speedup")].to_dict() == {"hf-compiled": 2.0, "m": 1.5, "vanilla": 1.0}
    widened, half = with_reference_column(board, None, versus, None)
    assert half is None and list(board.columns) == list(widened.columns[:-1])
    assert widened[("Overall", "Speedup vs hf-compiled")].to_dict() == {"hf-compiled": 1.0, "m": 0.75, "vanilla": 0.5}


@pytest.mark.parametrize("extra, message", [
    (["--reference", "hf-static"], "unknown reference hf-static; valid: hf-compiled, hf-eager"),
    (["--reference", "hf-eager", "--batch-size", "1,2"], "--reference runs at batch size 1 only"),
])
def test_bad_reference_is_one_line(tiny_target_dir, tmp_path, capsys, extra, message):
    assert main(run_args(tiny_target_dir, tmp_path / "bad", "--methods", "vanilla", *extra)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specbench: error: ") and message in err[0]
    assert not (tmp_path / "bad").exists()


def test_list_names_the_reference_rows(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "run --reference" in out and "  hf-compiled " in out and "  hf-eager " in out


class CountingCounter:
    """An energy counter whose every read is one joule later than the last (in microjoules)."""
    name = "counting"

    def __init__(self) -> None:
        self.reads = 0

    def read(self) -> list[int]:
        self.reads += 1
        return [self.reads * 1_000_000]

    def joules(self, start: list[int], end: list[int]) -> float:
        return (end[0] - start[0]) / 1e6


def test_reference_rows_read_the_energy_counter_around_each_turn(tiny_target_dir):
    target = load_model(str(tiny_target_dir), runtime="stock")
    question = Question("q", "", ["one", "two"])
    counter = CountingCounter()
    choice = ReferenceDecoder(target, "hf-eager", 64).answer(question, "t", Sampling(), 3, 0, energy=counter)
    assert choice.energy_j == [1.0, 1.0] and counter.reads == 4
    assert ReferenceDecoder(target, "hf-eager", 64).answer(question, "t", Sampling(), 3, 0).energy_j is None
