#!/usr/bin/env bash
# The fair comparison (reports/fair/): every method at equal training budget, tuned by one rule, then evaluated.
#   1. the equal-budget heads: bash scripts/train_default_drafters.sh fair  (medusa, hydra, sps at 640k positions on
#      the first 11 chunks of the self-distilled dataset; eagle and eagle3 at that budget already ship:
#      heads/eagle/smollm2-135m-instruct/equal-data and heads/eagle3/smollm2-135m-instruct-640k)
#   2. tune: every method's declared settings on the development split (the LAST question of each task), per
#      temperature -> reports/fair/settings.yaml
#   3. run: the first 10 questions of each task with those settings (never the tuned-on ones); the run folder is
#      committed (reports/fair/run/) so that a stopped session resumes it: rerun this script.
# Usage: [BUDGET=640k|640k-new|4m|published|published-suffix|published-lookahead] [LIMIT=N] bash scripts/figures/fair.sh [tune|run|all] [TEMPERATURES, default 0,1]   (LIMIT: questions per
# task, default 10; a run folder resumes with a larger LIMIT)
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1
what="${1:-all}"
temps="${2:-0,1}"
H=heads
T=smollm2-135m-instruct
# BUDGET=640k (default): every method; the trained ones with the 640k-position heads.
# BUDGET=4m: the trained methods only, with the 4M-position heads (train_default_drafters.sh fair4m; eagle3's is the
# shipped head, trained on the same data with the same schedule); the training-free rows do not depend on a budget.
case "${BUDGET:-640k}" in
  640k) E=$H/eagle/$T/equal-data; TAG=""
        TRAINED=("sps@head=$H/sps/$T/fair-640k" "medusa@head=$H/medusa/$T/fair-640k" "hydra@head=$H/hydra/$T/fair-640k"
                 "eagle@head=$E" "eagle3@head=$H/eagle3/$T-640k" "samd-eagle@head=$E")
        FREE=(pld lookahead recycling suffix rest samd swift) ;;
  4m)   E=$H/eagle/$T/fair-4m; TAG="4m-"
        TRAINED=("sps@head=$H/sps/$T/fair-4m" "medusa@head=$H/medusa/$T/fair-4m" "hydra@head=$H/hydra/$T/fair-4m"
                 "eagle@head=$E" "eagle3@head=$H/eagle3/$T" "samd-eagle@head=$E")
        FREE=() ;;
  # BUDGET=640k-new: the drafters added since the 640k tables were made (eagle-hass, pard, dflash; scripts/
  # train_default_drafters.sh fair-eagle-hass, fair-pard, fair-dflash), tuned and run beside vanilla, eagle and eagle3
  # with their 640k heads, so that their speedups and paired tau compare within one run.
  640k-new) E=$H/eagle/$T/equal-data; TAG="new-"
        TRAINED=("eagle@head=$E" "eagle3@head=$H/eagle3/$T-640k" "eagle-hass@head=$H/eagle-hass/$T/fair-640k"
                 "pard@head=$H/pard/$T/fair-640k" "dflash@head=$H/dflash/$T/fair-640k")
        PAIRS=(eagle-hass eagle pard eagle dflash eagle dflash eagle3 eagle3 eagle)
        FREE=() ;;
  # BUDGET=published: the methods whose behaviour changed to follow their reference code (issue 81: pld now drafts by
  # Saxena's rule), tuned and run beside vanilla and the variant they were before (pld@rule=hf: transformers' rule,
  # the fair tables' pld), so that the two compare within one run.
  published) TAG="published-"
        TRAINED=()
        FREE=(pld "pld@rule=hf")
        PAIRS=(pld "pld@rule=hf") ;;
  # BUDGET=published-METHOD (suffix, lookahead): a training-free method since it follows its reference code (issue 81),
  # tuned and run beside vanilla (its earlier rules are not kept as a variant: they were an inexact copy, not a
  # published method); the fair T=0 table's row of it ran the earlier rules.
  published-suffix|published-lookahead) TAG="${BUDGET}-"
        TRAINED=()
        FREE=("${BUDGET#published-}")
        NO_PAIRS=1 ;;
  *) echo "fair.sh: BUDGET must be 640k, 640k-new, 4m, published, published-suffix or published-lookahead, got ${BUDGET}" >&2; exit 2 ;;
esac
# The reader's questions, as pairs (a b: is a's tau above b's?), with 95% paired per-turn intervals.
[[ -v PAIRS ]] || PAIRS=(hydra medusa eagle hydra eagle3 eagle)
ALL=("${FREE[@]}" "${TRAINED[@]}"); METHODS=$(IFS=,; echo "${ALL[*]}")
NAME="${TAG}T${temps//,/-}"  # settings-NAME.yaml, run-NAME/ (records) and NAME/ (tables), e.g. 4m-T0
# QDIR: the six question files (python -m specbench tasks download data/tasks); the committed runs read
# an identical copy at ../shared/data/tasks, and a run resumes only with the folder it started with.
QUESTIONS=(--tasks all --question-dir "${QDIR:-../shared/data/tasks}")
if [[ $what == all || $what == tune ]]; then
  # 64 new tokens per dev question (the evaluation decodes 128): 50 settings x 6 questions fit in about 12 minutes.
  python -m specbench tune --methods "$METHODS" "${QUESTIONS[@]}" --max-new-tokens 64 --dev-questions 1 \
    --temperatures "$temps" \
    --out results/fair-tune-"$NAME" --settings-file reports/fair/settings-"$NAME".yaml
fi
if [[ $what == all || $what == run ]]; then
  python -m specbench run --methods "vanilla,$METHODS" "${QUESTIONS[@]}" --max-new-tokens 128 --limit "${LIMIT:-10}" \
    --temperatures "$temps" \
    --settings reports/fair/settings-"$NAME".yaml --out reports/fair/run-"$NAME" \
    --report-dir reports/fair/"$NAME"
  if [[ ",$temps," == *",0,"* ]]; then  # token identity is a T=0 check (T>0: tests/test_distribution.py, check --sampled)
    python -m specbench check reports/fair/run-"$NAME" | tee reports/fair/"$NAME"/check.txt \
      || echo "fair.sh: check found a lossless method that differs from vanilla (check.txt)"
  fi
  python scripts/step_times.py reports/fair/run-"$NAME" > reports/fair/"$NAME"/step_times.md
  [[ -v NO_PAIRS ]] || for t in ${temps//,/ }; do
    python scripts/paired_tau.py reports/fair/run-"$NAME" "${PAIRS[@]}" \
      --temperature "$t"
  done | tee reports/fair/"$NAME"/paired_tau.txt
fi
