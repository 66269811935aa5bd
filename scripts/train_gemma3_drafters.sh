#!/usr/bin/env bash
# Drafters for the second packaged target, Gemma 3 270M (reports/retired/gemma3-270m): a self-distilled dataset (the target's
# own greedy replies to a shuffled prefix of the training prompts, the recipe of the default target's self-t0), then an
# EAGLE head and Medusa heads trained on it for 1M positions each (lr 5e-4, 2,048-token batches, bf16 autocast: the
# fair comparison's schedule at a quarter of its 4M budget). Each step resumes when rerun; training uses the chunks
# the dataset holds.
# Usage: bash scripts/train_gemma3_drafters.sh [all|distill|eagle|medusa]
# Env: TRAIN_ARGS (more arguments for every step, e.g. "--device cuda --dtype float32"), PROMPTS (2048),
#      DISTILL_BATCH (rows decoded at once, 32), MAX_TOKENS (training positions, 1000000), FEATURES (the feature cache, results/features/gemma3-270m-self-t0).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
what="${1:-all}"
read -r -a extra <<< "${TRAIN_ARGS:-}"
T=gemma3-270m
DATA=heads/data/$T/self-t0
FEATURES=${FEATURES:-results/features/$T-self-t0}
if [[ $what == all || $what == distill ]]; then
  python -m specbench distill --target $T --out "$DATA" --features "$FEATURES" --prompts "${PROMPTS:-2048}" \
    --reply-tokens 256 --second-turn-share 0.2 --batch-size "${DISTILL_BATCH:-32}" "${extra[@]}"
fi
TRAIN=(--target $T --dataset "$DATA" --features "$FEATURES" --max-tokens "${MAX_TOKENS:-1000000}" --lr 5e-4 --batch-tokens 2048
       --eval-every 100 --autocast bfloat16)
for method in eagle medusa; do
  if [[ $what == all || $what == "$method" ]]; then
    python -m specbench train "$method" "${TRAIN[@]}" "${extra[@]}" --out "heads/$method/$T/self-t0-1m"
  fi
done
