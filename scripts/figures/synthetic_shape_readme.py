"""README.md of a synthetic-mode report folder (scripts/figures/synthetic_shape.sh): the command, the machine and
its load, each method's milliseconds per emitted token (wall time over new tokens, from the records) beside the
leaderboard's speedup and τ, and the method with the lowest cost per emitted token.
Usage: python scripts/figures/synthetic_shape_readme.py REPORT_DIR TEMPERATURE COMMAND"""
import json
import sys
from pathlib import Path

import pandas as pd

out, t, command = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
info = json.loads((out / "run" / "run.json").read_text())
env, load = info.get("environment", {}), info.get("load", [])
board = pd.read_csv(out / f"leaderboard_T{t}.csv", comment="#", index_col=0)
speed = next(c for c in board.columns if "speedup" in c.lower() and "ci" not in c.lower())
tau = next(c for c in board.columns if "τ" in c or "tau" in c.lower())
records = [json.loads(line) for line in (out / "run" / "records.jsonl").read_text().splitlines()]
per_token = {}
for r in records:
    if float(r["temperature"]) != float(t):
        continue
    c = r["choices"][0]
    time, tokens = per_token.get(r["method"], (0.0, 0))
    per_token[r["method"]] = (time + sum(c["wall_time"]), tokens + sum(c["new_tokens"]))
ms = {m: 1000 * time / tokens for m, (time, tokens) in per_token.items() if tokens}
best = min(ms, key=ms.get)
verdict = (f"**{best}** ({ms[best]:.0f} ms a token; vanilla {ms.get('vanilla', float('nan')):.0f} ms)"
           if best != "vanilla" else f"**vanilla** ({ms[best]:.0f} ms a token): no method beat it on this machine")
busy = max((max(e.get("at_start", 0), e.get("max_share", 0)) for e in load), default=0)
lines = [
    f"# Synthetic acceptance on the {info['settings']['target']} shape (TIMING-ONLY)",
    "",
    f"Made by `bash scripts/figures/synthetic_shape.sh {out}` at {env.get('git_commit', '?')}, "
    f"runtime {env.get('runtime', '?')}:",
    "",
    f"    {command}",
    "",
    f"Every method accepted along its draft's best path at the conditional per-position rates "
    f"{info['settings']['synthetic']} (the last repeats), over random weights of the shape: τ differs between "
    "methods only through how deep they draft, and the speedup is each method's system cost per emitted token "
    "against vanilla's. The outputs are not a model's: nothing here says how well a method drafts.",
    "",
    f"Machine: {env.get('cpu', env.get('device', '?'))}, {env.get('torch_threads', '?')} torch threads, "
    f"{env.get('dtype', '?')}. Load: other processes used up to {busy:.0%} of the CPUs while it ran"
    + (" -- the machine was shared, so only ratios within this run count (methods ran interleaved per question)."
       if busy > 0.25 else "."),
    "",
    f"Lowest system cost per emitted token at T={t}: {verdict}.",
    "",
    "This run's verification cost T(k), a target forward over k new tokens (run.json, measured as the run started, "
    "the fastest of 3 passes): " + ", ".join(f"k={k}: {ms_k:.0f} ms" for k, ms_k in
                                             zip(info["costs"]["sizes"], info["costs"]["verify_ms"]))
    + ". A step verifying k tokens pays T(k)/T(1) vanilla steps, so it must emit that many tokens to break even.",
    "",
    "| method | ms per emitted token | speedup over vanilla | τ |",
    "|---|---|---|---|",
]
for method in board.index:
    name = method.split(" ")[0]
    lines.append(f"| {method} | {ms.get(name, float('nan')):.0f} | {board.loc[method, speed]} | {board.loc[method, tau]} |")
lines += ["", f"Tables: `leaderboard_T{t}`, `speedup_T{t}` (per task), `latency_T{t}`, `budget.md` (the random "
          "drafters); records in `run/`."]
(out / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
print("\n".join(lines))
