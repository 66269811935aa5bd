"""Stored cost curves are measured well or not kept (specbench.run.cost_rounds, specbench.run.cost_store): a fake
timer and a fake load reading drive the measurement, so that load arriving mid-measurement, a falling curve and a
T(1) that a re-probe contradicts are shown to be measured again or refused, and never stored."""
from __future__ import annotations

import json

import pytest
import torch

from specbench.cli import main
from specbench.decode.cost_model import SIZES, CostCurve, CostModel, Measurement
from specbench.errors import SpecbenchError
from specbench.run.cost_rounds import CostPlan, CostRounds, CostWatch, measure_curve
from specbench.run.cost_store import (
    BESIDE_OTHER_WORK,
    Machine,
    MachineWatch,
    machine_costs,
    read_stored_costs,
    refresh_costs,
    store_costs,
)

IDLE_MS = {1: 27.0, 2: 28.0, 4: 30.0, 8: 34.0, 12: 38.0, 16: 42.0, 24: 50.0, 32: 58.0}
# The curve of issue 64, stored by a run that load arrived in: ten times the idle figures and falling at 16.
LOADED_MS = {1: 272.0, 2: 393.0, 4: 391.0, 8: 605.0, 12: 942.0, 16: 126.0, 24: 936.0, 32: 520.0}


class FakeTimer:
    """time(k) from a table of milliseconds; the calls in `slow` (by index) take their factor times as long."""

    def __init__(self, table: dict[int, float], slow: dict[int, float] | None = None) -> None:
        self.table, self.slow, self.calls = table, slow or {}, []

    def __call__(self, k: int) -> float:
        self.calls.append(k)
        return self.table[k] * self.slow.get(len(self.calls) - 1, 1.0) / 1000


class ScriptedLoad(CostWatch):
    """Load readings from a script (the last repeats), as a watch that reads the load."""
    reads_load = True

    def __init__(self, shares: list[float]) -> None:
        self.shares, self.readings = shares, 0

    def load(self, wait: bool) -> float | None:
        self.readings += 1
        if self.readings == 1:  # the window's opening
            return None
        return self.shares[min(self.readings - 2, len(self.shares) - 1)]


def measure(timer: FakeTimer, watch: CostWatch, plan: CostPlan | None = None) -> tuple[CostCurve, Measurement]:
    plan = plan or CostPlan()
    return measure_curve(CostRounds(plan, timer, watch), watch.resume(plan))


def machine(target: str = "tiny") -> Machine:
    return Machine(target, "cpu: test", "float32", "fast", 2, "torch", "transformers")


def model_of(curve: CostCurve, measured: Measurement | None) -> CostModel:
    return CostModel("tiny", "cpu", "test", curve, measured=measured)


def test_a_round_that_load_arrived_in_is_measured_again(tmp_path, monkeypatch):
    """Idle at the start, busy during the second round (it ran ten times slower): that round is thrown away and
    measured again, and the curve kept is the idle one, monotone, with the busy reading in its record."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    n = len(SIZES)
    timer = FakeTimer(IDLE_MS, slow={i: 10.0 for i in range(n, 2 * n)})
    watch = ScriptedLoad([0.05, 0.9, 0.05])
    curve, measured = measure(timer, watch)
    assert curve.seconds == [IDLE_MS[k] / 1000 for k in SIZES]
    assert measured.problem is None and measured.dropped == [0.9] and measured.loads == [0.05, 0.05, 0.05]
    assert len(timer.calls) == 4 * n + 1  # four rounds (one thrown away) and the T(1) re-probe
    assert timer.calls[:n] == SIZES and timer.calls[3 * n:4 * n] == SIZES  # rounds one and three ascending,
    assert timer.calls[n:2 * n] == timer.calls[2 * n:3 * n] == SIZES[::-1]  # round two (twice) descending
    assert store_costs(machine(), model_of(curve, measured)) is None
    assert read_stored_costs(machine()).measured == measured


def test_load_in_every_round_refuses_the_curve_and_it_is_never_stored(tmp_path, monkeypatch):
    """Load that stays: after CostPlan.redo rounds measured again the curve is refused with one reason, the run may
    use it for itself, and the store keeps nothing."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    timer = FakeTimer(LOADED_MS)
    curve, measured = measure(timer, ScriptedLoad([0.8]))
    assert measured.problem.startswith("other processes used up to 80% of the CPUs")
    assert measured.probe_ms is None and measured.loads == [] and len(measured.dropped) == CostPlan().redo + 1
    assert store_costs(machine(), model_of(curve, measured)) is None  # said when measured
    assert not machine().path().exists()


def test_a_falling_curve_is_measured_again_then_refused(tmp_path, monkeypatch):
    """Issue 64's curve (T(16) 126 ms below T(12) 942 ms) on a machine whose load reading saw nothing: the checks
    measure it a second time, refuse it, and the store keeps nothing; a hand-made falling curve is refused too."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    timer = FakeTimer(LOADED_MS)
    curve, measured = measure(timer, ScriptedLoad([0.0]))
    assert measured.attempts == 2 and "not monotone: T(16) 126.00 ms is below T(12) 942.00 ms" in measured.problem
    assert len(timer.calls) == 2 * (3 * len(SIZES) + 1)
    assert store_costs(machine(), model_of(curve, measured)) is None and not machine().path().exists()
    warning = store_costs(machine(), model_of(curve, None))
    assert "not monotone" in warning and not machine().path().exists()


def test_a_t1_that_a_reprobe_contradicts_is_measured_again(tmp_path):
    """The rounds agree but the re-probe after them took twice as long (the machine changed speed): measured once
    more; the second attempt's re-probe agrees, and that curve is kept."""
    n = len(SIZES)
    timer = FakeTimer(IDLE_MS, slow={3 * n: 2.0})
    curve, measured = measure(timer, ScriptedLoad([0.0]))
    assert measured.attempts == 2 and measured.problem is None
    assert measured.probe_ms == pytest.approx(IDLE_MS[1])
    first = FakeTimer(IDLE_MS, slow={3 * n: 2.0})
    _, refused = measure(first, ScriptedLoad([0.0]), CostPlan(attempts=1))
    assert "T(1) 27.00 ms disagrees with a re-probe's 54.00 ms" in refused.problem


class Interrupt(Exception):
    pass


class KeptWatch(MachineWatch):
    """The machine's watch (its samples kept beside the stored costs) with a quiet load reading."""

    def load(self, wait: bool) -> float | None:
        return 0.0


def test_an_interrupted_measurement_resumes_from_the_sizes_it_finished(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    stop_at = len(SIZES) + 3

    def interrupted(k: int) -> float:
        if len(calls) == stop_at:
            raise Interrupt
        calls.append(k)
        return IDLE_MS[k] / 1000

    calls: list[int] = []
    plan = CostPlan()
    watch = KeptWatch(machine(), progress=False)
    with pytest.raises(Interrupt):
        measure_curve(CostRounds(plan, interrupted, watch), watch.resume(plan))
    kept = json.loads(machine().samples_path().read_text())
    assert kept["seconds"][0] == [IDLE_MS[k] / 1000 for k in SIZES] and kept["seconds"][1].count(None) == 5
    timer = FakeTimer(IDLE_MS)
    watch = KeptWatch(machine(), progress=False)
    curve, measured = measure_curve(CostRounds(plan, timer, watch), watch.resume(plan))
    assert len(timer.calls) == 3 * len(SIZES) + 1 - stop_at  # only the sizes not yet timed, and the re-probe
    assert timer.calls[:5] == SIZES[4::-1]  # round two goes on, descending, where it stopped
    assert measured.problem is None and curve.seconds == [IDLE_MS[k] / 1000 for k in SIZES]
    watch.finish()
    assert not machine().samples_path().exists()
    for garbage in ("{not json", '{"sizes": [1], "repeats": 2, "started": "x", "seconds": 5}', "[1]"):
        machine().samples_path().write_text(garbage)  # unreadable samples: a fresh measurement, no error
        assert KeptWatch(machine(), progress=False).resume(plan).seconds == []


def stored_curve(table: dict[int, float], spread: float = 0.02) -> CostModel:
    curve = CostCurve(list(SIZES), [table[k] / 1000 for k in SIZES])
    return model_of(curve, Measurement("2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00", "test", [0.0],
                                       [], spread, table[1], 1))


def run_costs(probe_ms: float, quiet: bool = True, fresh: CostModel | None = None) -> tuple[CostModel, list[str], int]:
    lines, measured = [], []

    def measure_now(watch, plan) -> CostModel:
        measured.append(plan)
        return fresh or stored_curve(IDLE_MS)

    costs = machine_costs(machine(), measure_now, lambda: probe_ms / 1000, False, quiet, lines.append)
    return costs, lines, len(measured)


def test_a_run_reuses_stored_costs_only_when_a_probe_of_t1_agrees(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    assert store_costs(machine(), stored_curve(IDLE_MS)) is None
    costs, lines, measured = run_costs(probe_ms=28.0)
    assert measured == 0 and lines == [] and costs.source.startswith(f"stored: {machine().path()}")
    costs, lines, measured = run_costs(probe_ms=60.0)  # beyond the machine's spread: said, measured anew
    assert measured == 1 and "disagrees with 60.00 ms probed now" in lines[0]
    assert costs.source.startswith("measured at the run's start")
    costs, lines, measured = run_costs(probe_ms=60.0, quiet=False)  # busy at the start: reused, not probed
    assert measured == 0 and "not re-probed" in costs.source


def test_a_stored_falling_curve_is_not_reused_and_a_refused_one_keeps_the_stored(tmp_path, monkeypatch):
    """A curve stored before curves were checked (issue 64's) is measured anew; where the new measurement is
    refused while a usable stored curve exists, the run keeps the stored one and stores nothing."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    path = machine().path()
    path.parent.mkdir(parents=True)
    legacy = CostModel("tiny", "cpu", "test", CostCurve(list(SIZES), [LOADED_MS[k] / 1000 for k in SIZES]))
    path.write_text(json.dumps({"costs": legacy.to_dict()}))
    costs, lines, measured = run_costs(probe_ms=272.0)
    assert measured == 1 and "are not used (not monotone" in lines[0]
    assert store_costs(machine(), costs) is None and read_stored_costs(machine()).verify == costs.verify
    bad = stored_curve(IDLE_MS)
    refused = model_of(bad.verify, Measurement("now", "now", "test", [0.0], [], 0.9, 27.0, 2, "unsteady"))
    costs, lines, measured = run_costs(probe_ms=60.0, fresh=refused)
    assert measured == 1 and "refused (unsteady): not stored; this run keeps the stored ones" in lines[-1]
    assert costs.verify == bad.verify and "a new measurement was refused" in costs.source


def test_refresh_replaces_the_stored_curve_unless_the_new_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    old = stored_curve(IDLE_MS)
    old.drafting["level"] = 0.001
    assert store_costs(machine(), old) is None
    faster = stored_curve({k: v / 2 for k, v in IDLE_MS.items()})
    before, now = refresh_costs(machine(), lambda watch, plan: faster)
    assert before.verify == old.verify and now is faster
    assert read_stored_costs(machine()).verify == faster.verify and read_stored_costs(machine()).drafting == {}
    refused = model_of(old.verify, Measurement("now", "now", "test", [0.9], [], 0.9, 27.0, 2, "unsteady"))
    with pytest.raises(SpecbenchError, match=r"refused \(unsteady\); the stored costs are kept"):
        refresh_costs(machine(), lambda watch, plan: refused)
    assert read_stored_costs(machine()).verify == faster.verify


def test_costs_show_and_refresh_on_a_tiny_target(tiny_target_dir, tmp_path, monkeypatch, capsys):
    """`costs refresh` measures the tiny target's curve for real: on a quiet machine it is stored and `costs show`
    prints it with when, how and under what load; where the machine's load refuses it, one line says so, the exit
    is 2 and what was stored stays. A stored curve that falls is shown as not used."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    assert main(["costs", "show"]) == 0
    assert "no stored costs" in capsys.readouterr().out
    before = torch.get_num_threads()
    try:
        code = main(["costs", "refresh", "--target", str(tiny_target_dir), "--threads", "1"])
    finally:
        torch.set_num_threads(before)  # refresh sets the threads an idle run would decode with
    out, err = capsys.readouterr()
    files = [p for p in (tmp_path / "costs").glob("*.json") if not p.name.endswith(".samples.json")]
    if code == 0:
        assert "stored before: none" in out and "stored now:" in out and len(files) == 1
        stored = json.loads(files[0].read_text())
        assert stored["costs"]["measured"]["how"].startswith("fastest of 2 forwards")
        assert stored["machine"]["threads"] == 1 and stored["machine"]["target"] == str(tiny_target_dir)
        assert main(["costs", "show"]) == 0
        shown = capsys.readouterr().out
        assert str(files[0]) in shown and "T(k) ms: 1: " in shown and "others' load" in shown
    else:
        assert code == 2 and "refused" in err.splitlines()[-1] and files == []
    path = machine().path()
    path.parent.mkdir(parents=True, exist_ok=True)
    legacy = CostModel("tiny", "cpu", "test", CostCurve(list(SIZES), [LOADED_MS[k] / 1000 for k in SIZES]))
    path.write_text(json.dumps({"machine": {"target": "tiny"}, "costs": legacy.to_dict()}))
    assert main(["costs", "show"]) == 0
    assert "NOT USED by runs: not monotone: T(16) 126.00 ms is below T(12) 942.00 ms" in capsys.readouterr().out
    assert main(["costs", "refresh", "--threads", "0"]) == 2
    assert capsys.readouterr().err == "specbench: error: --threads must be >= 1, got 0\n"


def test_run_json_names_the_costs_a_run_decided_with(tiny_target_dir, tmp_path, monkeypatch):
    """run.json's costs say where they came from: this machine's stored file (and when it was measured), a
    measurement at the run's start (refused for storing when the machine's load or the checks said so), or
    --cost-curve; a resumed run keeps what it started with."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    args = ["run", "--target", str(tiny_target_dir), "--methods", "vanilla", "--tasks", "gsm8k", "--limit", "1",
            "--max-new-tokens", "4", "--temperatures", "0"]
    first = tmp_path / "first"
    assert main([*args, "--out", str(first), "--report-dir", str(tmp_path / "report1")]) == 0
    costs = json.loads((first / "run.json").read_text())["costs"]
    assert costs["source"].startswith(("measured at the run's start", "stored: "))
    assert costs["measured"]["how"].startswith("fastest of 2 forwards")
    stored = list((tmp_path / "cache" / "costs").glob("*.json"))
    assert ("refused" in costs["source"]) == (stored == [])  # a refused curve is never stored, an accepted one is
    second = tmp_path / "second"
    args += ["--report-dir", str(tmp_path / "report2"), "--cost-curve", str(first / "run.json")]
    assert main([*args, "--out", str(second)]) == 0
    reused = json.loads((second / "run.json").read_text())["costs"]
    assert reused["source"] == f"--cost-curve {first / 'run.json'}" and reused["verify_ms"] == costs["verify_ms"]
    assert main([*args, "--out", str(second), "--limit", "2"]) == 0
    assert json.loads((second / "run.json").read_text())["costs"]["source"] == reused["source"]


def test_a_run_busy_at_its_start_measures_for_itself_alone(tmp_path, monkeypatch):
    """Busy as it starts, with nothing stored: its rounds are measured once each (load is expected there, so none
    is measured again), and the curve, however it looks, is marked as measured beside other work: never stored."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    lines, plans = [], []

    def measure_now(watch, plan) -> CostModel:
        plans.append(plan)
        curve, measured = measure(FakeTimer(IDLE_MS), ScriptedLoad([0.9]), plan)
        return model_of(curve, measured)

    costs = machine_costs(machine(), measure_now, lambda: 0.027, False, False, lines.append)
    assert plans[0].attempts == 1 and costs.measured.dropped == [] and costs.measured.loads == [0.9] * 3
    assert costs.measured.problem == BESIDE_OTHER_WORK and "refused for storing" in costs.source
    assert "refused (the machine was busy as the run started): not stored" in lines[-1]
    assert store_costs(machine(), costs) is None and not machine().path().exists()
