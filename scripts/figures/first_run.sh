#!/usr/bin/env bash
# README command 1 timed from a fresh cache (what a new clone pays, the cost measurement included): once on this
# machine as it is, then beside a busy two-thread process (a torch matmul loop, killed afterwards).
# Writes reports/first-run/README.md (the CPU, both wall times, their ratio, the threads each run chose).
# Usage: bash scripts/figures/first_run.sh   (after scripts/install.sh; run it on an idle machine)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}
WORK=$(mktemp -d)
OUT=reports/first-run
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1
ARGS=(run --methods vanilla,pld --tasks mt_bench,gsm8k --limit 2 --temperatures 0 --max-new-tokens 64)
timed() {  # NAME: README command 1 into $WORK/NAME, its wall time in seconds on stdout
    local start end
    start=$(date +%s.%N)
    SPECBENCH_CACHE="$WORK/cache-$1" "$PY" -m specbench "${ARGS[@]}" --out "$WORK/$1" >"$WORK/$1.out" 2>"$WORK/$1.err"
    end=$(date +%s.%N)
    "$PY" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.0f}')" "$start" "$end"
}
threads() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['load'][-1]['threads'])" "$WORK/$1/run.json"; }
idle=$(timed idle)
"$PY" -c "import torch; torch.set_num_threads(2); a = torch.randn(1024, 1024)
while True: a @ a" &
busy_pid=$!
sleep 5
busy=$(timed busy)
kill "$busy_pid"
progress=$(tr '\r' '\n' <"$WORK/busy.err" | grep -c "tok/s" || true)
{
    echo "# README command 1: idle, and beside a busy two-thread process"
    echo
    echo "Made by \`bash scripts/figures/first_run.sh\` on $(date -u +%Y-%m-%d) at $(git rev-parse --short HEAD)."
    echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, flags:" \
         "$(grep -o -w -E 'avx2|fma|avx512f|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    echo
    echo "Command: \`python -m specbench ${ARGS[*]} --out DIR\`, each from an empty \`SPECBENCH_CACHE\` (so the"
    echo "one-time cost measurement is included)."
    echo
    echo "| machine | wall time (s) | threads chosen |"
    echo "| --- | --- | --- |"
    echo "| as it was (run it idle) | $idle | $(threads idle) |"
    echo "| beside \`torch.set_num_threads(2); while True: a @ a\` | $busy | $(threads busy) |"
    echo
    echo "Ratio busy / idle: $("$PY" -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$busy" "$idle"). Progress lines within questions while busy:" \
         "$progress (the bar's tokens and tokens/s, refreshed at most every 0.5 s)."
    echo
    echo "The busy run's warning line:"
    echo
    echo '```'
    grep "specbench: warning" "$WORK/busy.err" | head -1
    echo '```'
} >"$OUT/README.md"
cat "$OUT/README.md"
rm -rf "$WORK"
