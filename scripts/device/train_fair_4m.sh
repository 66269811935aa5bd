#!/usr/bin/env bash
# The fair comparison's second budget (issue 36, reports/fair) on a lent GPU, in one call: the feature cache of the
# whole self-distilled dataset (fp32 target, as on the CPU), then hydra, medusa, eagle and the sps draft trained from
# it at once, each for 4M positions (scripts/train_default_drafters.sh fair4m). Each finished head comes back under
# $OUT as parts of one tar (weights, config, log and train.json; no optimizer state): join them here with
#   cat heads-fair-4m.tar.part* | tar xf - -C heads
# Carry .dev1 then .dev2 (prepare.sh; .dev3 and .dev4 are not needed). Env: DEVICE (cuda), KEEP (/tmp/specbench-keep), SKIP_SETUP,
# EXTRACT_BATCH (conversations per prefill, 64), T_FEATURES and T_TRAIN (seconds), EXTRA (more train arguments,
# for a dry run on a CPU: "--dataset-chunks 1 --max-tokens 4096 --eval-every 1").
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
KEEP=${KEEP:-/tmp/specbench-keep}; LOG="$OUT/log.txt"
METHODS=(hydra medusa eagle sps)
source scripts/device/common.sh  # say, step, device_setup, send_back
[ "${SKIP_SETUP:-0}" != 1 ] && device_setup 120
export TRAIN_ARGS="--device ${DEVICE:-cuda} --dtype float32 --batch-size ${EXTRACT_BATCH:-64} --features $KEEP/features ${EXTRA:-}"
step "${T_FEATURES:-200}" features bash scripts/train_default_drafters.sh fair4m-features
for m in "${METHODS[@]}"; do  # four small jobs share the GPU; each gets a quarter of the host's cores
    OMP_NUM_THREADS=$(( $(nproc) / 4 > 0 ? $(nproc) / 4 : 1 )) LOG="$OUT/train-$m.txt" \
        step "${T_TRAIN:-300}" "train $m" bash scripts/train_default_drafters.sh "fair4m-$m" &
done
wait
send_back heads-fair-4m "${METHODS[@]/%//smollm2-135m-instruct/fair-4m}"
for m in "${METHODS[@]}"; do tail -n 3 "heads/$m/smollm2-135m-instruct/fair-4m/log.jsonl" 2>/dev/null; done | tee -a "$LOG"
say "done"
