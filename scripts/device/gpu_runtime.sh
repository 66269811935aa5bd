#!/usr/bin/env bash
# The GPU-runtime comparison (issue 53), in one call on a lent device machine after the three carry calls of
# scripts/device/README.md (.dev1, .dev2, then .dev3 with this script):
#   A. B=1, fp32 then bf16: vanilla, the reference rows hf-compiled and hf-eager, eagle, pld, eagle3, hydra, samd on
#      the compiled runtime (static cache, CUDA graphs), and vanilla and eagle on the eager runtime (the EAGLE and
#      Spec-Bench code's protocol); LIMIT questions of each of the six tasks, TOKENS new tokens, T=0.
#   B. batch sizes BATCH_SIZES for vanilla, eagle and pld (bf16, compiled; gsm8k, BATCH_TOKENS new tokens).
#   C. issue 54's synthetic-mode table on the SHAPE target (random weights of Llama-3.1-8B's shape, bf16) at rates
#      0.8,0.6,0.4 (TIMING-ONLY) for vanilla, pld, eagle, medusa, hydra, sps and swift, on both runtimes.
#   D. `check` on every lossless run folder (token identity with vanilla).
#   E. tests/test_static_mask.py and tests/test_static_head.py, whose CUDA cases hold the device-built masks to the
#      host's and the captured drafting (EAGLE-1/2/3 heads, Medusa, Hydra) to the uncaptured (needs pytest there).
# Each step has its own time limit (T_A32, T_A16, T_EAGER, T_B, T_S seconds: A-C under 8 minutes in all; D and E at
# most 2.8 minutes more), logs to $OUT/log.txt and goes on past a failed one; records are kept as they finish, so a
# step cut by its limit still leaves whole questions. The run folders come back as one tarball, made before D and E
# (a call cut during them still brings the records back); tables come from `python -m specbench report` here.
# Dry run on the CPU (tiny sizes, no setup):
#   SKIP_SETUP=1 DEVICE=cpu TASKS=gsm8k LIMIT=1 TOKENS=8 BATCH_TOKENS=8 BATCH_SIZES=1,2 SHAPE=tiny-llama T_A32=900 \
#       T_A16=900 T_EAGER=600 T_B=600 T_S=600 KEEP=/tmp/keep QDIR=data/tasks OUT=/tmp/gout PYTHON=python \
#       bash scripts/device/gpu_runtime.sh
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda}; LIMIT=${LIMIT:-2}; TOKENS=${TOKENS:-128}
BATCH_TOKENS=${BATCH_TOKENS:-32}; BATCH_SIZES=${BATCH_SIZES:-1,16,64}
KEEP=${KEEP:-/tmp/specbench-keep}; QDIR=${QDIR:-$KEEP/tasks}
LOG="$OUT/log.txt"
METHODS=${METHODS:-vanilla,eagle,pld,eagle3,hydra,samd}; TASKS=${TASKS:-all}
REFERENCE=${REFERENCE:-hf-compiled,hf-eager}; SHAPE=${SHAPE:-llama-3.1-8b}
source scripts/device/common.sh  # say, step, device_setup

if [ "${SKIP_SETUP:-0}" != 1 ]; then
    device_setup
    step 60 doctor python3 -m specbench doctor
fi
py=${PYTHON:-python3}
runs="$KEEP/runs"; mkdir -p "$runs"
common=(--device "$DEVICE" --question-dir "$QDIR" --temperatures 0 --tasks "$TASKS" --limit "$LIMIT"
        --max-new-tokens "$TOKENS")

step "${T_A32:-120}" "compiled fp32" $py -m specbench run --methods "$METHODS" --reference "$REFERENCE" \
    --runtime compiled --dtype float32 "${common[@]}" --out "$runs/compiled-float32"
step "${T_A16:-100}" "compiled bf16" $py -m specbench run --methods "$METHODS" --reference "$REFERENCE" \
    --runtime compiled --dtype bfloat16 "${common[@]}" --out "$runs/compiled-bfloat16"
step "${T_EAGER:-50}" "eager fp32" $py -m specbench run --methods vanilla,eagle --runtime eager --dtype float32 \
    "${common[@]}" --out "$runs/eager-float32"
step "${T_B:-60}" "batch bf16" $py -m specbench run --methods vanilla,eagle,pld --runtime compiled --dtype bfloat16 \
    --device "$DEVICE" --question-dir "$QDIR" --temperatures 0 --tasks gsm8k --limit 64 \
    --max-new-tokens "$BATCH_TOKENS" --batch-size "$BATCH_SIZES" --out "$runs/batch-bfloat16"
for runtime in compiled eager; do
    step "${T_S:-50}" "synthetic $SHAPE $runtime" $py -m specbench run --target "shape:$SHAPE" \
        --synthetic-acceptance 0.8,0.6,0.4 --methods vanilla,pld,eagle,medusa,hydra,sps,swift --runtime "$runtime" \
        --dtype bfloat16 --device "$DEVICE" --question-dir "$QDIR" --tasks mt_bench,gsm8k --limit 1 \
        --max-new-tokens "$BATCH_TOKENS" --temperatures 0 --out "$runs/synthetic-$SHAPE-$runtime"
done
# The records come back even if the call is cut during D or E (`check` can be rerun on them at home).
tar czf "$OUT/gpu-runtime.tgz" -C "$runs" . 2>>"$LOG"
for run in compiled-float32 compiled-bfloat16 eager-float32 batch-bfloat16; do
    [ -d "$runs/$run" ] && step 20 "check $run" $py -m specbench check "$runs/$run"
done
# E. the static runtime's device-built masks on CUDA, bit for bit the host's, and the drafters' captured forwards
#    drafting what they draft uncaptured (their CUDA cases skip on a CPU).
step 90 "CUDA mask and capture tests" $py -m pytest -q -p no:cacheprovider tests/test_static_mask.py \
    tests/test_static_head.py
say "done"
grep "^== \|identical\|DIFFER\|Error\|error\|passed\|failed" "$LOG" | tail -40
