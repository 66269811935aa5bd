#!/usr/bin/env bash
# Reproduces every drafter shipped in heads/ for the default target (SmolLM2-135M-Instruct), on a CPU.
# Each command resumes from its checkpoint when rerun (a session may be stopped at any time), and all of them
# share one feature cache: 2,560 conversations of ../shared/data/train/prompts.jsonl with their fixed replies.
# Usage: bash scripts/train_default_drafters.sh [all|eagle|self|ablations|medusa|sps]
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
what="${1:-all}"
FEATURES=results/features/smollm2-fixed
COMMON=(--features "$FEATURES" --prompts 2560 --mode fixed)
HEADS=heads/eagle/smollm2-135m-instruct

if [[ $what == all || $what == eagle ]]; then
  python -m specbench train eagle "${COMMON[@]}" --out "$HEADS/shifted" \
    --max-tokens 3500000 --hours 1.0 --lr 5e-4 --eval-every 100
fi
if [[ $what == all || $what == self ]]; then
  # Self-distillation: the target writes its own replies to 1,280 training prompts (greedy, batched), and
  # (1) a head trained from scratch on them with the ablation budget, to compare with ablation/shifted (fixed replies),
  # (2) the fixed-reply head above fine-tuned on them: the shipped head.
  SELF=(--features results/features/smollm2-self --prompts 1280 --mode self --batch-size 16)
  python -m specbench train eagle "${SELF[@]}" --out "$HEADS/ablation/self-shifted" \
    --max-tokens 400000 --lr 5e-4 --eval-every 50
  python -m specbench train eagle "${SELF[@]}" --out "$HEADS/self-finetuned" \
    --max-tokens 1000000 --lr 2e-4 --eval-every 50 --snapshot-tokens 250000 --opt "init=$HEADS/shifted"
fi
if [[ $what == all || $what == sps ]]; then
  python -m specbench train sps-draft "${COMMON[@]}" --out heads/sps/smollm2-135m-instruct \
    --max-tokens 1000000 --lr 5e-4 --eval-every 100 --opt layers=2
fi
if [[ $what == all || $what == medusa ]]; then
  python -m specbench train medusa "${COMMON[@]}" --out heads/medusa/smollm2-135m-instruct \
    --max-tokens 1000000 --lr 1e-3 --eval-every 100 --opt heads=4
fi
if [[ $what == all || $what == ablations ]]; then
  # The paper's ablation: four heads, same data and the same (smaller) budget, differing only in what they read.
  for inputs in shifted unshifted feature token; do
    python -m specbench train eagle "${COMMON[@]}" --out "$HEADS/ablation/$inputs" \
      --max-tokens 400000 --lr 5e-4 --eval-every 50 --opt "inputs=$inputs"
  done
fi
