#!/usr/bin/env bash
# The synthetic-mode table (TIMING-ONLY): vanilla, pld, eagle, medusa, hydra, sps and swift at the same conditional
# per-position acceptance (--synthetic-acceptance) on a real model's shape with random weights (--target shape:NAME),
# so that the table shows each method's system cost per emitted token, not its drafter's quality
# (docs/measuring.md, "Timing-only modes"). The trained methods get random drafters of the shape.
# Writes OUT/ (default reports/synthetic-<shape>): the tables, run/ (records and run.json) and README.md (the
# command, the machine, its load, and the method with the lowest cost per emitted token, read off the leaderboard).
# Usage: [SHAPE=llama-3.2-1b] [RATES=0.8,0.6,0.4] [TASKS=mt_bench,gsm8k] [LIMIT=1] [TOKENS=32] [TEMPERATURES=0]
#        [EXTRA="--device cuda --dtype bfloat16 --runtime ..."] bash scripts/figures/synthetic_shape.sh [OUT]
# The committed CPU report (reports/synthetic-llama-3.2-1b) ran with EXTRA="--runtime stock": the fast CPU runtime
# keeps a prepacked copy of every weight, which for the 1B shape and four drafters' lm_head copies took 21 GB.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}
SHAPE=${SHAPE:-llama-3.2-1b}
RATES=${RATES:-0.8,0.6,0.4}
TASKS=${TASKS:-mt_bench,gsm8k}
LIMIT=${LIMIT:-1}
TOKENS=${TOKENS:-32}
TEMPERATURES=${TEMPERATURES:-0}
METHODS=${METHODS:-vanilla,pld,eagle,medusa,hydra,sps,swift}
OUT=${1:-reports/synthetic-$SHAPE}
export HF_HUB_OFFLINE=1
# shellcheck disable=SC2206
ARGS=(run --target "shape:$SHAPE" --synthetic-acceptance "$RATES" --methods "$METHODS" --tasks "$TASKS"
      --limit "$LIMIT" --max-new-tokens "$TOKENS" --temperatures "$TEMPERATURES" ${EXTRA:-})
mkdir -p "$OUT"
"$PY" -m specbench "${ARGS[@]}" --out "$OUT/run" --report-dir "$OUT" >"$OUT/run.log" 2>"$OUT/run.err" || {
    tail -5 "$OUT/run.err" >&2; exit 1; }
T=${TEMPERATURES%%,*}
"$PY" - "$OUT" "$T" "python -m specbench ${ARGS[*]} --out $OUT/run --report-dir $OUT" <<'PYEOF'
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
    f"Lowest system cost per emitted token at T={t}: **{best}** ({ms[best]:.0f} ms a token; vanilla "
    f"{ms.get('vanilla', float('nan')):.0f} ms).",
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
PYEOF
