#!/usr/bin/env bash
# README command 1 timed from a fresh cache (what a new clone pays, the cost measurement included): once on this
# machine as it is, then beside a busy two-thread process (a torch matmul loop, killed afterwards).
# Writes reports/first-run/: times.json (both wall times, the command, the CPU; the record the README's figures
# come from), idle/run.json and busy/run.json (each run's settings, environment, costs and load log) and README.md.
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
for name in idle busy; do mkdir -p "$OUT/$name" && cp "$WORK/$name/run.json" "$OUT/$name/run.json"; done
"$PY" -c "import json, sys; json.dump({'command': sys.argv[1], 'cpu': sys.argv[2], 'idle_seconds': int(sys.argv[3]),
    'busy_seconds': int(sys.argv[4]), 'ratio_busy_idle': round(int(sys.argv[4]) / int(sys.argv[3]), 2),
    'commit': sys.argv[5]}, open(sys.argv[6], 'w'), indent=1)" "python -m specbench ${ARGS[*]}" \
    "$(lscpu | sed -n 's/^Model name: *//p')" "$idle" "$busy" "$(git rev-parse --short HEAD)" "$OUT/times.json"
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
    echo "<!-- src: times.json idle/run.json busy/run.json -->"
    echo "| machine | wall time (s) | threads chosen |"
    echo "| --- | --- | --- |"
    echo "| as it was (run it idle) | $idle | $(threads idle) |"
    echo "| beside \`torch.set_num_threads(2); while True: a @ a\` | $busy | $(threads busy) |"
    echo
    echo "<!-- src: times.json -->"
    echo "Ratio busy / idle: $("$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['ratio_busy_idle'])" "$OUT/times.json")." \
         "Progress lines within questions while busy: $progress (the bar's tokens and tokens/s, refreshed at most" \
         "every half second). The records: \`times.json\`, and each run's \`run.json\` (its load log says how busy"
    echo "the machine was) in \`idle/\` and \`busy/\`."
    echo
    echo "The busy run's warning line:"
    echo
    echo '```'
    grep "specbench: warning" "$WORK/busy.err" | head -1
    echo '```'
} >"$OUT/README.md"
cat "$OUT/README.md"
rm -rf "$WORK"
