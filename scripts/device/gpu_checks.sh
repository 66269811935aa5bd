#!/usr/bin/env bash
# The GPU checks, in one call on a lent device machine (see scripts/device/README.md):
#   A. every lossless method's token identity with vanilla at T=0 on CUDA in float32, and
#   B. the same in bfloat16 (vanilla in bf16 is the reference there),
#   C. the target's T(k) curve on the GPU (bench --cost) in bf16 and fp32,
#   D. the batch curve B = 1..64 (vanilla, eagle, pld) in bf16.
# Each step has its own time limit, logs to $OUT and goes on when the one before failed: the run folders come back as
# tarballs, and the reports are made from them on the developer's machine (python -m specbench report / check).
# Env: DEVICE (cuda), LIMIT (questions per task, 1), TOKENS (64), BATCH_LIMIT (11), BATCH_TOKENS (48),
#      BATCH_SIZES (1,2,4,8,16,32,64), SKIP_SETUP (1 on a machine where specbench is installed),
#      KEEP (an absolute folder holding what the calls carried, /tmp/specbench-keep), QDIR (the evaluation sets, $KEEP/tasks), and T_A, T_B, T_C, T_D (each step's seconds),
#      STEPS (which of A B C D to run, "A B C D"), IDENTITY_TASKS and BATCH_TASKS (--tasks of A/B and of D, all).
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda}; LIMIT=${LIMIT:-1}; TOKENS=${TOKENS:-64}
BATCH_LIMIT=${BATCH_LIMIT:-11}; BATCH_TOKENS=${BATCH_TOKENS:-48}; BATCH_SIZES=${BATCH_SIZES:-1,2,4,8,16,32,64}
KEEP=${KEEP:-/tmp/specbench-keep}; QDIR=${QDIR:-$KEEP/tasks}
LOG="$OUT/log.txt"
STEPS=" ${STEPS:-A B C D} "; IDENTITY_TASKS=${IDENTITY_TASKS:-all}; BATCH_TASKS=${BATCH_TASKS:-all}
METHODS=vanilla,eagle,eagle3,hydra,medusa,sps,swift,pld,lookahead,recycling,rest,samd,samd-eagle,suffix,eagle1
source scripts/device/common.sh  # say, step, device_setup

if [ "${SKIP_SETUP:-0}" != 1 ]; then
    device_setup 120
    step 60 doctor python3 -m specbench doctor
fi
py=${PYTHON:-python3}
common=(--device "$DEVICE" --question-dir "$QDIR" --temperatures 0)

for dtype in float32 bfloat16; do
    [ "$dtype" = float32 ] && [[ $STEPS != *" A "* ]] && continue
    [ "$dtype" = bfloat16 ] && [[ $STEPS != *" B "* ]] && continue
    run="$KEEP/runs/identity-$dtype"
    limit=${T_A:-130}; [ "$dtype" = bfloat16 ] && limit=${T_B:-100}
    step "$limit" "identity $dtype" $py -m specbench run --methods "$METHODS" "${common[@]}" --dtype "$dtype" \
        --tasks "$IDENTITY_TASKS" --limit "$LIMIT" --max-new-tokens "$TOKENS" --out "$run"
    step 60 "check $dtype" $py -m specbench check "$run"
    tar czf "$OUT/identity-$dtype.tgz" -C "$KEEP/runs" "identity-$dtype" 2>>"$LOG"
done

for dtype in bfloat16 float32; do
    [[ $STEPS != *" C "* ]] && break
    step "${T_C:-40}" "T(k) $dtype" $py -m specbench bench --cost --device "$DEVICE" --question-dir "$QDIR" --dtype "$dtype" \
        --json "$OUT/cost-$dtype.json"
done

if [[ $STEPS == *" D "* ]]; then
    run="$KEEP/runs/batch-bfloat16"
    step "${T_D:-120}" "batch curve" $py -m specbench run --methods vanilla,eagle,pld "${common[@]}" --dtype bfloat16 \
        --tasks "$BATCH_TASKS" --limit "$BATCH_LIMIT" --max-new-tokens "$BATCH_TOKENS" --batch-size "$BATCH_SIZES" --out "$run"
    step 60 "check batch" $py -m specbench check "$run"
    tar czf "$OUT/batch-bfloat16.tgz" -C "$KEEP/runs" batch-bfloat16 2>>"$LOG"
fi
say "done"
grep "^== \|OK\|FAIL\|DIFFER\|Error\|error" "$LOG" | tail -60
