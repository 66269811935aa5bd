"""Per-step drafting and verification time of every method in a run, from its records (ms per target forward).

Usage: python scripts/step_times.py RUN_DIR
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from specbench.run.records import read_records


def step_times(run_dir: Path) -> pd.DataFrame:
    rows = [{"method": r["method"], "T": r["temperature"], "draft_s": sum(c["draft_time"]),
             "verify_s": sum(c["verify_time"]), "steps": sum(c["decoding_steps"]), "tokens": sum(c["new_tokens"])}
            for r in read_records(run_dir) for c in r["choices"]]
    totals = pd.DataFrame(rows).groupby(["method", "T"]).sum()
    return pd.DataFrame({"draft ms/step": 1000 * totals["draft_s"] / totals["steps"],
                         "verify ms/step": 1000 * totals["verify_s"] / totals["steps"],
                         "τ": totals["tokens"] / totals["steps"], "steps": totals["steps"]}).round(2)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(step_times(Path(sys.argv[1])).to_markdown())
