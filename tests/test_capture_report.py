"""Fixed shapes' capture accounting (issue 61): every target shape is met before timing, a failed capture
is loud in the run's tables (UNCAPTURED), and --require-graphs turns it into an error. On the CPU nothing is captured,
so the counters count the captures there would have been."""
from __future__ import annotations

import json

import pytest

from specbench.cli import main
from specbench.decode.engine import generate, generate_batch
from specbench.decode.graphs import CaptureError
from specbench.decode.runner import BATCH_SIZES, BLOCK_SIZES, ModelRunner
from specbench.decode.sampling import Sampling
from specbench.methods.vanilla.drafter import VanillaDrafter
from specbench.run.decoder import capture_report, prepare_shapes
from specbench.run.run_info import RunInfo, uncaptured_note
from tests.conftest import tiny_llama


def test_a_cpu_run_at_fixed_shapes_meets_no_new_target_shape_while_timed(tiny_target_dir, tmp_path):
    out = tmp_path / "r"
    assert main(["run", "--target", str(tiny_target_dir), "--out", str(out), "--max-new-tokens", "12",
                 "--methods", "vanilla,pld", "--tasks", "gsm8k,mt_bench", "--limit", "2", "--temperatures", "0",
                 "--graphs", "on", "--batch-size", "1,2"]) == 0
    graphs = json.loads((out / "run.json").read_text())["environment"]["cuda_graphs"]
    assert graphs["asked"] is False  # the CPU: nothing captured, the shapes counted as they would be
    # rows 1 and 2, every block size, without hidden states (neither method reads them): all met before timing
    assert graphs["target_shapes"] == 2 * len(BLOCK_SIZES) and graphs["target_timed"] == 0, graphs
    assert "none first met during timing" in graphs["line"]


def test_shapes_met_after_timing_began_are_counted():
    """Without prepare_shapes a step's first shapes are met while timed: the counter sees them."""
    model = tiny_llama(64, seed=3, layers=2, hidden=32).eval()
    runner = ModelRunner(model, fixed_shapes=True)
    runner.reserve(2, 64)
    runner.start_timing()
    generate(model, [1, 2, 3], VanillaDrafter(), Sampling(), 4, set(), runner=runner)
    assert capture_report(runner).target_timed == 2  # the prefill's block of 4 and the one-token steps


def test_prepare_shapes_covers_what_a_batch_meets():
    model = tiny_llama(64, seed=3, layers=2, hidden=32).eval()
    runner = ModelRunner(model, fixed_shapes=True)
    runner.reserve(3, 64)
    prepare_shapes(runner, 3, hidden=False)
    assert capture_report(runner).target_shapes == len([b for b in BATCH_SIZES if b <= 4]) * len(BLOCK_SIZES)
    runner.start_timing()
    generate_batch(model, [[1, 2, 3], [4, 5], [6]], [VanillaDrafter() for _ in range(3)], Sampling(), 6, set(),
                   runner=runner)
    assert capture_report(runner).target_timed == 0


def test_require_graphs_makes_a_failed_capture_an_error():
    model = tiny_llama(64, seed=3, layers=2, hidden=32).eval()
    runner = ModelRunner(model, fixed_shapes=True)
    runner.graphs.capture = True  # asked for anyway: no CUDA here, so the capture fails
    runner.require_capture()
    with pytest.raises(CaptureError, match="--require-graphs"):
        generate(model, [1, 2, 3], VanillaDrafter(), Sampling(), 4, set(), runner=runner)


def test_require_graphs_on_a_runtime_that_captures_nothing_is_one_error_line(tiny_target_dir, tmp_path, capsys):
    code = main(["run", "--target", str(tiny_target_dir), "--out", str(tmp_path / "r"), "--max-new-tokens", "4",
                 "--methods", "vanilla", "--tasks", "gsm8k", "--limit", "1", "--temperatures", "0",
                 "--graphs", "on", "--require-graphs"])
    assert code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--require-graphs" in err[0] and "no CUDA device" in err[0], err
    assert not (tmp_path / "r").exists()  # refused before the run folder was made or a model loaded


def test_tables_say_uncaptured_when_a_capture_failed():
    def info(graphs: dict) -> RunInfo:
        return RunInfo(environment={"cuda_graphs": graphs})

    failed = {"asked": True, "uncaptured": "operation not permitted when stream is capturing",
              "target_timed": 0, "drafting_timed": 0}
    assert "UNCAPTURED" in uncaptured_note(info(failed)) and "operation not permitted" in uncaptured_note(info(failed))
    late = {**failed, "uncaptured": "", "drafting_timed": 3}
    assert "3 shapes were first captured inside timed questions" in uncaptured_note(info(late))
    assert uncaptured_note(info({**late, "drafting_timed": 0})) is None
    assert uncaptured_note(info({"asked": False, "uncaptured": "", "target_timed": 5})) is None  # the CPU
    assert uncaptured_note(info("3 target shapes captured")) is None  # an older run's line


def test_a_cache_that_grows_drops_its_graphs_and_their_memory_pool():
    """Seen on an H200 (reports/gpu-h200/runtime-1): a grown cache released the captured graphs but kept their pool,
    and the next capture into that released pool failed inside PyTorch's allocator (the drafting ran uncaptured)."""
    runner = ModelRunner(tiny_llama(64, seed=3, layers=2, hidden=32).eval(), fixed_shapes=True)
    runner.reserve(1, 64)
    runner.graphs.graphs[(1, 4)], runner.graphs.pool = object(), (1, 0)  # stand-ins for a capture on CUDA
    runner.reserve(1, 64)  # fits the cache: the graphs stay
    assert runner.graphs.graphs and runner.graphs.pool == (1, 0)
    runner.reserve(3, 64)  # rows bucketed to 4: new buffers
    assert runner.graphs.graphs == {} and runner.graphs.pool is None


@pytest.mark.parametrize("synthetic", [None, "0.8,0.6,0.4"])
def test_every_drafting_shape_is_met_before_timing(tmp_path, synthetic):
    """The warm-up runs each method with the run's verifier (synthetic acceptance's too: the lossless one accepts
    nothing on random weights, so a fill of accepted tokens was first met while timed) and, at fixed shapes, meets
    every prompt-length and accept-length bucket a drafter's forwards can take: no drafting shape is first met
    inside a timed question, at either batch size."""
    out = tmp_path / "r"
    extra = ["--synthetic-acceptance", synthetic] if synthetic else []
    assert main(["run", "--target", "shape:tiny-llama", "--out", str(out), "--max-new-tokens", "16",
                 "--methods", "eagle,sps", "--tasks", "gsm8k,mt_bench", "--limit", "2", "--temperatures", "0",
                 "--graphs", "on", "--batch-size", "1,2", *extra]) == 0
    graphs = json.loads((out / "run.json").read_text())["environment"]["cuda_graphs"]
    assert graphs["drafting_shapes"] > 0 and graphs["drafting_timed"] == 0 and graphs["target_timed"] == 0, graphs


def test_a_timed_prompt_past_the_largest_bucket_is_counted_and_flagged():
    """A prefill longer than the largest bucket runs at its own shape, uncaptured: counted while timed, and on CUDA
    every table's header says so."""
    model = tiny_llama(64, seed=3, layers=2, hidden=32).eval()
    runner = ModelRunner(model, fixed_shapes=True)
    runner.reserve(1, 128)
    prepare_shapes(runner, 1, hidden=False)
    runner.start_timing()
    generate(model, [1, 2, 3], VanillaDrafter(), Sampling(), 4, set(), runner=runner)
    assert capture_report(runner).own_shape_timed == 0
    generate(model, [5] * (BLOCK_SIZES[-1] + 5), VanillaDrafter(), Sampling(), 4, set(), runner=runner)
    report = capture_report(runner)
    assert report.own_shape_timed == 1 and report.target_timed == 0 and "own shape" in report.line()
    note = uncaptured_note(RunInfo(environment={"cuda_graphs": {**report.to_dict(), "asked": True}}))
    assert note is not None and "1 timed forwards ran uncaptured" in note
