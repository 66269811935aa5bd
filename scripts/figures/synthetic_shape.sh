#!/usr/bin/env bash
# The synthetic-mode table (TIMING-ONLY): vanilla, pld, eagle, medusa, hydra, sps and swift at the same conditional
# per-position acceptance (--synthetic-acceptance) on a real model's shape with random weights (--target shape:NAME),
# so that the table shows each method's system cost per emitted token, not its drafter's quality
# (docs/measuring.md, "Timing-only modes"). The trained methods get random drafters of the shape.
# Writes OUT/ (default reports/synthetic-<shape>): the tables, run/ (records and run.json) and README.md (the
# command, the machine, its load, and the method with the lowest cost per emitted token, read off the leaderboard).
# Usage: [SHAPE=llama-3.2-1b] [RATES=0.8,0.6,0.4] [TASKS=mt_bench,gsm8k] [LIMIT=1] [TOKENS=32] [TEMPERATURES=0]
#        [EXTRA="--device cuda --dtype bfloat16 --graphs on"] bash scripts/figures/synthetic_shape.sh [OUT]
# The committed CPU report (reports/synthetic-llama-3.2-1b) ran with EXTRA="--runtime stock": the few-token CPU kernels
# keep a prepacked copy of every weight, which for the 1B shape and four drafters' lm_head copies took 21 GB.
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
LOG=$(mktemp)
"$PY" -m specbench "${ARGS[@]}" --out "$OUT/run" --report-dir "$OUT" >"$OUT/run.log" 2>"$LOG" || {
    tail -5 "$LOG" >&2; exit 1; }
T=${TEMPERATURES%%,*}
"$PY" scripts/figures/synthetic_shape_readme.py "$OUT" "$T" "python -m specbench ${ARGS[*]} --out $OUT/run --report-dir $OUT"
