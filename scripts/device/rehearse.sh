#!/usr/bin/env bash
# The GPU-runtime calls rehearsed on this CPU exactly as the device machine gets them (scripts/device/README.md):
#   1. the carried folders as prepare.sh builds them (wheels for this machine's Python; the device's is 3.12);
#   2. the tree as it arrives there: only the files that travel (aside.sh files: no heads/, reports/, results/,
#      tests/fixtures/conformance/), in a folder with no ../shared beside it; each call's tree plus its carried
#      folder within the 64 MiB a call takes;
#   3. the device's Python stood in for by image.py (this environment's packages that the image has too, without
#      transformers or pytest: the carried wheels must bring them), every carried folder copied into KEEP as the carry
#      calls do;
#   4. gpu_runtime.sh, then gpu_runtime_checks.sh, with DEVICE=cpu at tiny sizes and every step limit times
#      LIMIT_SCALE (default 4: this CPU runs the tiny sizes about as long as the GPU runs the real ones, plus the
#      slower loading and torch.compile of two cores); it fails when any step of either does not exit 0.
# Usage: bash scripts/device/rehearse.sh [WORK]   (WORK: a folder to keep everything in; default a temporary one)
# Env: OMIT (a path the carried folders bring, to leave out of whichever holds it, e.g.
#      heads/eagle/smollm2-135m-instruct/DEFAULT: the test that shows a missing file fails the rehearsal), CALLS ("1 2": which device calls to rehearse).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-$(mktemp -d)}; mkdir -p "$work"; work=$(cd "$work" && pwd)
CALLS=" ${CALLS:-1 2} "
export LIMIT_SCALE=${LIMIT_SCALE:-4}
cd "$repo"
py_version=$(python -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
echo "rehearse: carried folders (prepare.sh, wheels for Python $py_version)"
DEST="$work" WHEEL_PYTHON="$py_version" bash scripts/device/prepare.sh >/dev/null
carried=(.dev1 .dev2 .dev3 .dev4)
if [ -n "${OMIT:-}" ]; then
    for d in "${carried[@]}"; do [ -e "$work/$d/$OMIT" ] && rm -rf "${work:?}/$d/$OMIT" && echo "rehearse: left out $d/$OMIT"; done
fi
echo "rehearse: the tree as it travels"
rm -rf "$work/device"; mkdir -p "$work/device/tree"
bash scripts/device/aside.sh files | tar cf - -T - | tar xf - -C "$work/device/tree"
tree_bytes=$(du -sb "$work/device/tree" | cut -f1)
for d in "${carried[@]}"; do
    bytes=$(( tree_bytes + $(du -sb "$work/$d" | cut -f1) ))
    echo "rehearse: the call carrying $d sends $((bytes / 1048576)) MiB"
    [ "$bytes" -le $((64 * 1048576)) ] || { echo "rehearse: FAILED: the call carrying $d is over 64 MiB" >&2; exit 1; }
done
python scripts/device/image.py "$work/device/image" >/dev/null
keep="$work/device/keep"; mkdir -p "$keep"
for d in "${carried[@]}"; do cp -r "$work/$d/." "$keep/"; done  # the four carry calls
cd "$work/device/tree"
export PATH="$work/device/image/bin:$PATH" KEEP="$keep" OUT="$work/device/out" DEVICE=cpu
# tiny sizes: one gsm8k question, 8 tokens; the batch step B=1,2 over 2 questions; the synthetic step on a tiny shape;
# bench --overhead at B=1,2
export TASKS=gsm8k LIMIT=1 TOKENS=8 BATCH_TOKENS=8 BATCH_SIZES=1,2 BATCH_LIMIT=2 SHAPE=tiny-llama OVERHEAD_SIZES=1,2
# Fixed costs instead of measuring this CPU's (minutes per dtype and runtime, for a curve the rehearsal needs only to
# size trees with): a flat verification curve, labelled as the rehearsal's. It decides tree sizes, nothing reported.
printf '{"target": "smollm2-135m-instruct", "device": "rehearsal: a flat curve, not measured", "sizes": [1, 64], "verify_ms": [10, 10]}\n' \
    > "$work/device/rehearsal-costs.json"
export RUN_ARGS="--cost-curve $work/device/rehearsal-costs.json"
# The A runs on stock kernels, not the device's inductor: torch.compile of the 135M target is slow on two cores
# (each graph is C++ built here; the command is the same but for this value; tests/test_inductor.py runs the inductor kernels on the CPU).
export KERNELS=stock
rc=0
if [[ $CALLS == *" 1 "* ]]; then bash scripts/device/gpu_runtime.sh || rc=1; fi
if [[ $CALLS == *" 2 "* ]]; then bash scripts/device/gpu_runtime_checks.sh || rc=1; fi
echo "rehearse: $([ $rc = 0 ] && echo 'passed: every step of the device calls exited 0' || echo 'FAILED: see the log above and in') $OUT"
exit $rc
