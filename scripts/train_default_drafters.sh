#!/usr/bin/env bash
# Reproduces every drafter shipped in heads/ for the default target (SmolLM2-135M-Instruct), on a CPU.
# Each command resumes from its checkpoint when rerun (a session may be stopped at any time), and all of them
# share two feature caches: 2,560 conversations of ../shared/data/train/prompts.jsonl with their fixed replies,
# and 1,280 of them with replies the target wrote itself.
# Usage: bash scripts/train_default_drafters.sh [all|eagle|self|ablations|medusa|sps|eagle3-640k|eagle3|self-t0|self-t0-6m|self-t0-all|self-t0-12m|fair|fair-<method>|fair4m|fair4m-features|fair4m-<method>]
# TRAIN_ARGS: more arguments for the fair4m trainings, e.g. "--device cuda --dtype float32 --batch-size 64".
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
what="${1:-all}"
# The two feature caches: fixed reference replies, and replies the target wrote itself.
COMMON=(--features results/features/smollm2-fixed --prompts 2560 --mode fixed)
SELF=(--features results/features/smollm2-self --prompts 1280 --mode self --batch-size 16)
HEADS=heads/eagle/smollm2-135m-instruct
# EAGLE-3 against EAGLE at equal data and budget: the first 11 chunks (2,816 conversations) of the committed
# self-distilled dataset (docs/training.md "Self-distilled data in one pass"; its features are rebuilt when missing).
# Heads trained while the dataset grows name their share of it with --dataset-chunks K (its first K chunks).
DATASET=(--dataset heads/data/smollm2-135m-instruct/self-t0 --features results/features/smollm2-self-t0)
DISTILLED=("${DATASET[@]}" --dataset-chunks 11)

if [[ $what == all || $what == eagle ]]; then
  # The previous default head, in two stages: (1) fixed replies, 3.5M positions; (2) fine-tuned for 1M positions on
  # self-distilled replies (the target writes its own replies to 1,280 training prompts, greedy, batched), which
  # is what it has to predict when decoding.
  python -m specbench train eagle "${COMMON[@]}" --out "$HEADS/fixed" \
    --max-tokens 3500000 --hours 1.0 --lr 5e-4 --eval-every 100
  python -m specbench train eagle "${SELF[@]}" --out "$HEADS/shifted" \
    --max-tokens 1000000 --lr 2e-4 --eval-every 50 --snapshot-tokens 250000 --opt "init=$HEADS/fixed"
fi
if [[ $what == all || $what == self ]]; then
  # Fixed vs self-distilled replies at the ablation budget: compare with ablation/shifted.
  python -m specbench train eagle "${SELF[@]}" --out "$HEADS/ablation/self-shifted" \
    --max-tokens 400000 --lr 5e-4 --eval-every 50
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
if [[ $what == all || $what == eagle3-640k ]]; then
  # The first EAGLE-3 head (640k positions on 11 chunks), and an EAGLE head from scratch on the same conversations,
  # positions, batches and lr. --feature-layers: features rebuilt on a fresh machine keep EAGLE-3's fused layers
  # from the same prefill.
  python -m specbench train eagle3 "${DISTILLED[@]}" --feature-layers 2,15,27 \
    --out heads/eagle3/smollm2-135m-instruct-640k \
    --max-tokens 640000 --lr 5e-4 --batch-tokens 2048 --eval-every 50 --snapshot-tokens 160000
  python -m specbench train eagle "${DISTILLED[@]}" --out "$HEADS/equal-data" \
    --max-tokens 640000 --lr 5e-4 --batch-tokens 2048 --eval-every 50
fi
if [[ $what == all || $what == eagle3 ]]; then
  # The shipped EAGLE-3 head (what `--methods eagle3` loads): the whole dataset, 4M positions from scratch, and the
  # EAGLE head it is compared with at equal data (same batches, schedule and lr; kept under results/).
  WHOLE=("${DATASET[@]}" --dataset-chunks 67 --max-tokens 4000000 --lr 5e-4 --batch-tokens 2048 --eval-every 200
         --snapshot-tokens 1000000 --autocast bfloat16)
  python -m specbench train eagle3 "${WHOLE[@]}" --feature-layers 2,15,27 --out heads/eagle3/smollm2-135m-instruct
  python -m specbench train eagle "${WHOLE[@]}" --out results/heads/eagle-all-4m
fi
if [[ $what == all || $what == self-t0 ]]; then
  # The previous default EAGLE head: the earlier recipe's stage 1 (`fixed`) fine-tuned on
  # the first 11 chunks of the self-distilled dataset (2,816 conversations, 2.2x the 1,280 of stage 2) for 2M
  # positions.
  python -m specbench train eagle "${DISTILLED[@]}" --out "$HEADS/self-t0" \
    --max-tokens 2000000 --lr 2e-4 --eval-every 50 --snapshot-tokens 500000 --opt "init=$HEADS/fixed"
fi
if [[ $what == all || $what == self-t0-6m ]]; then
  # The previous default EAGLE head: `fixed` fine-tuned on the first 18 chunks (4,608 conversations) for 6M
  # positions, three times self-t0's schedule.
  python -m specbench train eagle "${DATASET[@]}" --dataset-chunks 18 --out "$HEADS/self-t0-6m" \
    --max-tokens 6000000 --lr 2e-4 --eval-every 100 --snapshot-tokens 1000000 --opt "init=$HEADS/fixed"
fi
if [[ $what == all || $what == self-t0-all ]]; then
  # The previous default EAGLE head: self-t0-6m fine-tuned on the whole dataset (67 chunks, all 17,146 training
  # prompts answered) for 8M more positions, in bf16 autocast (1.35x here with avx512_bf16).
  python -m specbench train eagle "${DATASET[@]}" --dataset-chunks 67 --out "$HEADS/self-t0-all" \
    --max-tokens 8000000 --lr 2e-4 --eval-every 200 --snapshot-tokens 2000000 --autocast bfloat16 \
    --opt "init=$HEADS/self-t0-6m"
fi
if [[ $what == all || $what == self-t0-12m ]]; then
  # The default EAGLE head (methods/eagle/checkpoint.py DEFAULT_HEAD): from scratch on the whole dataset, one 12M-position
  # schedule (about 2.2 passes) at lr 5e-4 in bf16 autocast; no earlier stage on fixed replies.
  python -m specbench train eagle "${DATASET[@]}" --dataset-chunks 67 --out "$HEADS/self-t0-12m" \
    --max-tokens 12000000 --lr 5e-4 --eval-every 200 --snapshot-tokens 2000000 --autocast bfloat16
fi
if [[ $what == all || $what == fair || $what == fair-* ]]; then
  # The fair comparison (reports/fair): every trained drafter on the same conversations, positions, schedule, lr,
  # batches and precision; nobody's lr or width was tuned.
  # Budget 640k: the first 11 chunks of the self-distilled dataset, as `eagle3-640k` above (whose two heads,
  # heads/eagle3/smollm2-135m-instruct-640k and heads/eagle/smollm2-135m-instruct/equal-data, are this budget's eagle3
  # and eagle rows). Run one with `fair-<method>` (fair-medusa, fair-hydra, fair-sps, fair-eagle-hass: EAGLE's head
  # trained with HASS's objective, eagle-hass's row; fair-pard: PARD's draft from scratch, not from the sps draft,
  # so that it too learns from 640k positions only; fair-dflash).
  FAIR=("${DISTILLED[@]}" --feature-layers 2,15,27 --max-tokens 640000 --lr 5e-4 --batch-tokens 2048 --eval-every 50)
  for method in medusa hydra sps eagle-hass pard dflash; do
    if [[ $what == all || $what == fair || $what == "fair-$method" ]]; then
      trainer=("$method"); [[ $method == sps ]] && trainer=(sps-draft)
      [[ $method == eagle-hass ]] && trainer=(eagle --objective hass)
      [[ $method == pard ]] && trainer=(pard --opt init=scratch)
      python -m specbench train "${trainer[@]}" "${FAIR[@]}" --out "heads/$method/smollm2-135m-instruct/fair-640k"
    fi
  done
fi
if [[ $what == all || $what == fair4m || $what == fair4m-* ]]; then
  # The fair comparison's second budget: the whole dataset (67 chunks, 17,146 conversations) and the schedule of
  # `eagle3` above (4M positions, 2,048-token batches, lr 5e-4, bf16 autocast), whose head is this budget's eagle3
  # row. fair4m-features builds the feature cache alone (so that the four trainings can then run at once, as
  # scripts/device/train_fair_4m.sh does on a GPU); fair4m-<method> trains one of hydra, medusa, eagle, sps.
  read -r -a extra <<< "${TRAIN_ARGS:-}"
  FAIR4=("${DATASET[@]}" --dataset-chunks 67 --max-tokens 4000000 --lr 5e-4 --batch-tokens 2048 --eval-every 200
         --autocast bfloat16)
  if [[ $what == all || $what == fair4m || $what == fair4m-features ]]; then
    python -m specbench train eagle "${FAIR4[@]}" "${extra[@]}" --features-only
  fi
  for method in hydra medusa eagle sps; do
    if [[ $what == all || $what == fair4m || $what == "fair4m-$method" ]]; then
      trainer=$method; [[ $method == sps ]] && trainer=sps-draft
      python -m specbench train "$trainer" "${FAIR4[@]}" "${extra[@]}" --out "heads/$method/smollm2-135m-instruct/fair-4m"
    fi
  done
fi
