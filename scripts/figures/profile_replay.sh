#!/usr/bin/env bash
# Acceptance profiles replayed at scale (TIMING-ONLY): `report` writes every method's speculation_profile.json from
# an existing run's records (default: the fair T=0 run on the default target, reports/fair/run-T0; nothing is
# decoded again there), then each method runs on a real model's shape with random weights (--target shape:NAME)
# with --synthetic-acceptance replaying ITS OWN profile (per question category where the profile has it), beside
# vanilla in the same run: the speedup the method would have at that shape if its drafter accepted as it did on the
# default target (docs/measuring.md, "Acceptance profiles"). The trained methods get random drafters of the shape
# (their @head= option is dropped; their other options are kept).
# Writes OUT/ (default reports/profile-replay): profiles/ (the replayed files), <method>/ (each method's run/ and
# tables), replay_T<t>.md/.csv (every method's row, scripts/figures/profile_replay_table.py) and README.md.
# Usage: [RUN=reports/fair/run-T0] [SHAPE=llama-3.2-1b] [TASKS=gsm8k,humaneval] [LIMIT=1] [TOKENS=16]
#        [METHODS="eagle pld ..." (default: every profile)] [EXTRA="--runtime stock"]
#        [COST_CURVE=FILE (a run.json or `bench --cost --json` of the same target; default: the first run measures
#        the costs and the others reuse them)] bash scripts/figures/profile_replay.sh [OUT]
# A method whose run fails is left out of the table (its error in <method>/error.txt) and the others go on.
# The committed CPU table ran with EXTRA="--runtime stock" (the few-token CPU kernels keep a prepacked copy of every
# weight: reports/synthetic-llama-3.2-1b).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}
RUN=${RUN:-reports/fair/run-T0}
SHAPE=${SHAPE:-llama-3.2-1b}
TASKS=${TASKS:-gsm8k,humaneval}
LIMIT=${LIMIT:-1}
TOKENS=${TOKENS:-16}
OUT=${1:-reports/profile-replay}
export HF_HUB_OFFLINE=1
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$PY" -m specbench report "$RUN" --out "$TMP/report" --no-plots >/dev/null
rm -rf "$OUT/profiles"
cp -r "$TMP/report/profiles" "$OUT/profiles"
T=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['settings']['temperatures'][0])" "$RUN/run.json")
T=$("$PY" -c "import sys; print(f'{float(sys.argv[1]):g}')" "$T")
METHODS=${METHODS:-$(cd "$OUT/profiles" && ls speculation_profile_*_T"$T".json | sed "s/^speculation_profile_//; s/_T$T.json$//")}
COSTS=()
[ -z "${COST_CURVE:-}" ] || COSTS=(--cost-curve "$COST_CURVE")
for METHOD in $METHODS; do
    PROFILE="$OUT/profiles/speculation_profile_${METHOD}_T$T.json"
    # the method as the run named it, without @head= (a folder trained for the default target)
    SPEC=$("$PY" -c "
import json, sys
spec = json.load(open(sys.argv[1]))['draft_checkpoint']['method']
name, _, opts = spec.partition('@')
kept = [o for o in opts.split(':') if o and not o.startswith('head=')]
print(name + ('@' + ':'.join(kept) if kept else ''))" "$PROFILE")
    # shellcheck disable=SC2206
    ARGS=(run --target "shape:$SHAPE" --synthetic-acceptance "$PROFILE" --methods "$SPEC" --tasks "$TASKS"
          --limit "$LIMIT" --max-new-tokens "$TOKENS" --temperatures "$T" ${EXTRA:-})
    rm -rf "$OUT/$METHOD"
    mkdir -p "$OUT/$METHOD"
    if ! "$PY" -m specbench "${ARGS[@]}" "${COSTS[@]}" --out "$OUT/$METHOD/run" --report-dir "$OUT/$METHOD" \
        >"$OUT/$METHOD/run.log" 2>"$TMP/err"; then
        grep "specbench: error" "$TMP/err" >"$OUT/$METHOD/error.txt" || tail -3 "$TMP/err" >"$OUT/$METHOD/error.txt"
        echo "$METHOD: failed ($(cat "$OUT/$METHOD/error.txt"))" >&2
        continue
    fi
    # later runs reuse the first run's fixed costs (run.json) instead of measuring them again
    [ ${#COSTS[@]} -gt 0 ] || COSTS=(--cost-curve "$OUT/$METHOD/run/run.json")
    echo "$METHOD: done $(date -u +%H:%M:%S)" >&2
done
MADE_BY="RUN=$RUN SHAPE=$SHAPE TASKS=$TASKS LIMIT=$LIMIT TOKENS=$TOKENS EXTRA=\"${EXTRA:-}\"${COST_CURVE:+ COST_CURVE=$COST_CURVE}"
"$PY" scripts/figures/profile_replay_table.py "$OUT" "$T" "$RUN" "$MADE_BY bash scripts/figures/profile_replay.sh $OUT" \
    "python -m specbench run --target shape:$SHAPE --synthetic-acceptance $OUT/profiles/speculation_profile_<method>_T$T.json --methods <method> --tasks $TASKS --limit $LIMIT --max-new-tokens $TOKENS --temperatures $T ${EXTRA:-} ${COSTS[*]} --out $OUT/<method>/run --report-dir $OUT/<method>"
