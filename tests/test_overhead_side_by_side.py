"""scripts/figures/overhead_probe.py measures this tree through the public API and prints well-formed JSON;
scripts/figures/overhead_side_by_side.py's table keeps each revision's fastest round, divides new by old, sums the
counted waits, leaves a cell one revision lacks blank, and refuses an unknown revision in one line."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "scripts" / "figures"


def driver() -> ModuleType:
    spec = importlib.util.spec_from_file_location("overhead_side_by_side", FIGURES / "overhead_side_by_side.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_probe_measures_this_tree(tmp_path: Path) -> None:
    command = [sys.executable, str(FIGURES / "overhead_probe.py"), "--target", driver().TARGET, "--runtimes", "fast",
               "--methods", "vanilla,eagle@total_tokens=8", "--batches", "1", "--max-new-tokens", "4",
               "--prompt-tokens", "8", "--waits"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert Path(result["tree"]) == ROOT and Path(result["methods_folder"]) == ROOT / "methods"
    assert (result["layers"], result["threads"], result["skipped"]) == (30, 1, [])
    assert [(c["method"], c["batch"]) for c in result["cells"]] == [("vanilla", 1), ("eagle@total_tokens=8", 1)]
    for cell in result["cells"]:
        assert cell["steps"] >= 1 and cell["host_ms"] > 0 and cell["forward_ms"] > 0, cell
        assert cell["host_wall_ms"] > 0 and cell["same_tokens"] and cell["stop_reasons"] == ["length"], cell
        assert cell["waits"] and all(k.split()[0] in ("d2h", "h2d", "shape") and v > 0
                                     for k, v in cell["waits"].items()), cell
    vanilla, eagle = result["cells"]
    assert eagle["host_ms"] > vanilla["host_ms"]  # a tree drafted per step is more host work than none


def cell(method: str, host_ms: float, waits: dict | None = None, tokens: str = "t", same: bool = True) -> dict:
    return {"runtime": "compiled", "method": method, "batch": 4, "steps": 15, "host_ms": host_ms, "waits": waits,
            "tokens": tokens, "same_tokens": same}


def test_table_fastest_rounds_and_ratios() -> None:
    old = [{"cells": [cell("vanilla", 2.0, {"d2h item": 1.0, "h2d to": 3.0}), cell("eagle", 10.0, {"d2h cpu": 14.0}),
                      cell("pld", 1.5, {})]},
           {"cells": [cell("vanilla", 1.6), cell("eagle", 12.0), cell("pld", 1.2)]}]
    new = [{"cells": [cell("vanilla", 0.9, {"h2d to": 1.5}), cell("eagle", 3.0, {"d2h cpu": 2.0}, tokens="u"),
                      cell("sps", 4.0, {})]},
           {"cells": [cell("vanilla", 0.8), cell("eagle", 2.5), cell("sps", 5.0)]}]
    rows = {r.method: r for r in driver().side_by_side(old, new)}
    assert list(rows) == ["vanilla", "eagle", "pld", "sps"]
    vanilla, eagle, pld, sps = rows.values()
    assert (vanilla.old_ms, vanilla.new_ms, vanilla.ratio) == (1.6, 0.8, pytest.approx(0.5))
    assert (vanilla.old_waits, vanilla.new_waits, vanilla.same_tokens) == (4.0, 1.5, True)
    assert (eagle.old_ms, eagle.new_ms, eagle.ratio) == (10.0, 2.5, pytest.approx(0.25))
    assert (eagle.old_waits, eagle.new_waits, eagle.same_tokens) == (14.0, 2.0, False)  # tokens differ
    assert (pld.new_ms, pld.ratio, pld.old_waits, pld.same_tokens) == (None, None, 0, None)
    assert (sps.old_ms, sps.new_ms, sps.ratio, sps.new_steps) == (None, 4.0, None, 15)


def test_rounds_that_disagree_are_not_the_same_tokens() -> None:
    old = [{"cells": [cell("vanilla", 1.0, {})]}, {"cells": [cell("vanilla", 1.1, tokens="other")]}]
    new = [{"cells": [cell("vanilla", 1.0, {})]}, {"cells": [cell("vanilla", 0.9, same=False)]}]
    assert [r.same_tokens for r in driver().side_by_side(old, new)] == [False]
    assert [r.same_tokens for r in driver().side_by_side(old[:1], new[:1])] == [True]


def test_unknown_revision_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(FIGURES / "overhead_side_by_side.py"), "--old", "no-such-revision",
                           "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert done.stderr.strip() == "overhead_side_by_side: 'no-such-revision' is not a commit of this repository"
    assert not (tmp_path / "out").exists()
