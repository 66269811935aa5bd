#!/usr/bin/env bash
# The CPU latency report (reports/latency-cpu/): the default target, every lossless method and the two reference
# rows (hf-compiled, hf-eager) on the first question of each of the six tasks (mt_bench's two turns), at T=0 and T=1,
# 64 new tokens, fp32: the latency tables (TTFT, TPOT, ITL at p50/p95/p99), their CDF plots and the efficiency
# tables. The run folder (records.jsonl, run.json) is committed beside the tables, so that
# `python -m specbench report --verify reports/latency-cpu` remakes them; rerunning this script resumes a stopped run.
# Usage: [QDIR=DIR] [PYTHON=python] bash scripts/figures/latency_cpu.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1
PY=${PYTHON:-python}
OUT=reports/latency-cpu
METHODS=vanilla,pld,sps,eagle,eagle1,eagle3,medusa,hydra,lookahead,recycling,suffix,rest,samd,samd-eagle,swift
# QDIR: the six question files (python -m specbench tasks download data/tasks); the committed run read an identical
# copy at ../shared/data/tasks, and a run resumes only with the folder it started with.
"$PY" -m specbench run --methods "$METHODS" --reference hf-compiled,hf-eager \
  --tasks all --question-dir "${QDIR:-data/tasks}" --limit 1 --temperatures 0,1 --max-new-tokens 64 \
  --dtype float32 --out "$OUT"/run --report-dir "$OUT"
