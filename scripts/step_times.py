"""Per-step drafting and verification time of every method in a run, from its records (ms per target forward).

Usage: python scripts/step_times.py RUN_DIR
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from specbench.run.records import read_records


def step_times(run_dir: Path) -> pd.DataFrame:
    rows = [{"method": r.method, "T": r.temperature, "draft_s": sum(r.choice.draft_time),
             "verify_s": sum(r.choice.verify_time), "steps": sum(r.choice.decoding_steps),
             "tokens": sum(r.choice.new_tokens)}
            for r in read_records(run_dir)]
    totals = pd.DataFrame(rows).groupby(["method", "T"]).sum()
    return pd.DataFrame({"draft ms/step": 1000 * totals["draft_s"] / totals["steps"],
                         "verify ms/step": 1000 * totals["verify_s"] / totals["steps"],
                         "τ": totals["tokens"] / totals["steps"], "steps": totals["steps"]}).round(2)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(step_times(Path(sys.argv[1])).to_markdown())
