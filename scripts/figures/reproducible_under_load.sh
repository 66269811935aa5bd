#!/usr/bin/env bash
# Two fresh runs of the same settings on this machine, the first idle and the second beside two busy processes,
# each getting its costs the default way (a fresh cost store: the idle run measures and stores them, the loaded
# run reuses them), then `check --against`: the same token ids and accept lengths, record by record.
# Usage: bash scripts/figures/reproducible_under_load.sh OUT_DIR [extra run arguments]
set -euo pipefail
out=${1:?usage: $0 OUT_DIR [run arguments]}
shift
methods=${METHODS:-vanilla,pld,lookahead,eagle,eagle3,medusa}
export SPECBENCH_CACHE="$out/cost-store"
rm -rf "$out" && mkdir -p "$out"
common=(--methods "$methods" --tasks gsm8k,mt_bench --limit 1 --temperatures 0,1 --max-new-tokens 64 "$@")
python -m specbench run --out "$out/idle" --report-dir "$out/idle-report" "${common[@]}" > "$out/idle.log"
python -c 'while True: pass' & hog1=$!
python -c 'while True: pass' & hog2=$!
trap 'kill $hog1 $hog2 2>/dev/null || true' EXIT
python -m specbench run --out "$out/loaded" --report-dir "$out/loaded-report" "${common[@]}" > "$out/loaded.log"
kill $hog1 $hog2
python -m specbench check "$out/idle" --against "$out/loaded" | tee "$out/check.txt"
