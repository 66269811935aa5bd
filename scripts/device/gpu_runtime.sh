#!/usr/bin/env bash
# The GPU-runtime comparison, call 1 of 2 on a lent device machine, after the four carry calls of
# scripts/device/README.md (.dev1, .dev2, .dev3, then .dev4 with this script); gpu_runtime_checks.sh is the next call.
#   setup, then doctor (every drafter the runs load is found: a missing DEFAULT pointer stops here, not in a run);
#   A. B=1, fp32 then bf16: vanilla and eagle, and the reference row hf-compiled, on CUDA graphs (--graphs on: fixed
#      shapes, captured) over KERNELS (default inductor: the target's forward compiled by torch.compile, hf-compiled's
#      kernels under our graphs; the first run, runtime-1, had stock kernels and more methods: vanilla 0.84x
#      hf-compiled in fp32, 0.81x in bf16), LIMIT questions of each of TASKS, TOKENS new tokens, T=0. Few rows: each
#      costs a warm-up, and the target's compilation (a few graphs, before the first question) comes first;
#   B. batch sizes BATCH_SIZES for vanilla, eagle and pld (bf16, graphs on, default kernels; gsm8k's first BATCH_LIMIT
#      questions, BATCH_TOKENS new tokens).
# The eager run (--kernels stock --graphs off: the EAGLE and Spec-Bench code's protocol) is in call 2.
# The limits (seconds; each times LIMIT_SCALE) sum to 30 + 30 + 200 + 160 + 100 = 520, under the 540 s a call may
# spend (600 s less the transfers); each step logs to $OUT/log.txt and the script goes on past a failed one, exiting 1
# at the end when any failed. Records are kept as they finish (a step cut by its limit leaves whole questions); the
# run folders come back as $OUT/gpu-runtime.tgz; tables come from `python -m specbench report` here.
# Rehearsed on the CPU exactly as the device gets it: bash scripts/device/rehearse.sh (CI runs it).
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda}
BATCH_TOKENS=${BATCH_TOKENS:-32}; BATCH_SIZES=${BATCH_SIZES:-16,64}; BATCH_LIMIT=${BATCH_LIMIT:-64}
KEEP=${KEEP:-/tmp/specbench-keep}; QDIR=${QDIR:-$KEEP/tasks}
LOG="$OUT/log.txt"
METHODS=${METHODS:-vanilla,eagle}
REFERENCE=${REFERENCE:-hf-compiled}
KERNELS=${KERNELS:-inductor}  # the A runs' target kernels (the rehearsal: stock, rehearse.sh says why)
RUN_ARGS=${RUN_ARGS:-}  # more arguments for every run of the default target (the rehearsal: fixed costs)
source scripts/device/common.sh  # say, step, device_setup, finish, runtime_questions

if [ "${SKIP_SETUP:-0}" != 1 ]; then
    device_setup 30 || stop
fi
py=${PYTHON:-python3}
step 30 doctor $py -m specbench doctor || stop
runs="$KEEP/runs"; mkdir -p "$runs"
runtime_questions  # LIMIT questions of each of TASKS, TOKENS new tokens, T=0

step 200 "graphs fp32" $py -m specbench run $RUN_ARGS --methods "$METHODS" --reference "$REFERENCE" \
    --kernels "$KERNELS" --graphs on --dtype float32 "${questions[@]}" --out "$runs/graphs-float32"
step 160 "graphs bf16" $py -m specbench run $RUN_ARGS --methods "$METHODS" --reference "$REFERENCE" \
    --kernels "$KERNELS" --graphs on --dtype bfloat16 "${questions[@]}" --out "$runs/graphs-bfloat16"
step 100 "batch bf16" $py -m specbench run $RUN_ARGS --methods vanilla,eagle,pld --graphs on --dtype bfloat16 \
    --device "$DEVICE" --question-dir "$QDIR" --temperatures 0 --tasks gsm8k --limit "$BATCH_LIMIT" \
    --max-new-tokens "$BATCH_TOKENS" --batch-size "$BATCH_SIZES" --out "$runs/batch-bfloat16"
tar czf "$OUT/gpu-runtime.tgz" -C "$runs" . 2>>"$LOG"
grep "^== \|uncaptured\|UNCAPTURED\|Error\|error" "$LOG" | tail -40
finish
