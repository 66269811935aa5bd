#!/usr/bin/env bash
# The GPU-runtime comparison, call 2 of 2: right after gpu_runtime.sh on the same warm machine (its $KEEP holds the
# install and the run folders; the tree is sent again, so any file may travel).
#   D. no graphs run of call 1 UNCAPTURED (first: it costs nothing);
#   E. tests/test_step_inputs.py and tests/test_head_cache.py with the carried pytest: their CUDA cases hold the
#      device-built masks to the host's and the captured drafting (EAGLE-1/2/3 heads, Medusa, Hydra) to the
#      uncaptured (after a cache grew, too: Graphs.drop's fresh memory pool);
#   A'. vanilla and eagle eager (--kernels stock --graphs off: the EAGLE and Spec-Bench code's protocol), fp32, the
#      questions of call 1's A runs; the graphs' vanilla against the eager one's, token for token (with call 1's
#      inductor kernels this compares inductor's floats with transformers' modules', which may part at a near-tie:
#      a difference there is a finding, not a lossless method's failure), then `check` on every run folder (token
#      identity with vanilla within each run);
#   F. `bench --overhead` for vanilla and eagle, uncaptured (the host's work per step and per added row, on the GPU's
#      host);
#   C. last (a call cut by the session's device time loses the least): the synthetic-mode table on the SHAPE target
#      (random weights of Llama-3.1-8B's shape, bf16) at rates 0.8,0.6,0.4 (TIMING-ONLY) for vanilla, pld, eagle,
#      medusa, hydra, sps and swift, with graphs on and eager.
# The limits (seconds; each times LIMIT_SCALE) sum to 5 + 90 + 90 + 30 + 4 x 40 + 60 + 50 + 50 = 535; the script exits 1
# when any step failed. The synthetic run folders come back as $OUT/gpu-synthetic.tgz, F's table in $OUT/overhead/,
# the log as $OUT/log-checks.txt.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda}; BATCH_TOKENS=${BATCH_TOKENS:-32}; OVERHEAD_SIZES=${OVERHEAD_SIZES:-1,4,64}
RUN_ARGS=${RUN_ARGS:-}
KEEP=${KEEP:-/tmp/specbench-keep}; QDIR=${QDIR:-$KEEP/tasks}
LOG="$OUT/log-checks.txt"
SHAPE=${SHAPE:-llama-3.1-8b}
source scripts/device/common.sh  # say, step, device_resume, finish, runtime_questions

if [ "${SKIP_SETUP:-0}" != 1 ]; then
    device_resume || stop
fi
py=${PYTHON:-python3}
runs="$KEEP/runs"
# A capture that failed in call 1 fails this step (run.json's cuda_graphs says UNCAPTURED, and why; so do the tables),
# and so do a shape first captured inside a timed question and a run cut before it wrote its capture report
step 5 "every graphs run captured before timing" $py - "$runs" <<'EOF'
import pathlib, sys
from specbench.run.run_info import read_run_info, uncaptured_note
bad = []
for run in sorted(path.parent for path in pathlib.Path(sys.argv[1]).glob("*/run.json")):
    info = read_run_info(run)
    graphs = info.environment.get("cuda_graphs")  # None: --graphs off; a str: the warm-up's line, the run was cut
    note = f"cut before its capture report ({graphs})" if isinstance(graphs, str) else uncaptured_note(info)
    if note:
        bad.append(f"{run.name}: {note}")
print("\n".join(bad) or "every graphs run captured every shape before timing")
sys.exit(1 if bad else 0)
EOF
step 90 "CUDA mask and capture tests" $py -m pytest -q -p no:cacheprovider tests/test_step_inputs.py \
    tests/test_head_cache.py -k "cuda or captured_drafting"  # only the CUDA cases (the CPU ones run in CI)
runtime_questions  # call 1's graphs runs' questions
step 90 "eager fp32" $py -m specbench run $RUN_ARGS --methods vanilla,eagle --kernels stock --graphs off --dtype float32 \
    "${questions[@]}" --out "$runs/eager-float32"
step 30 "graphs vanilla = eager vanilla (fp32)" $py -m specbench check "$runs/graphs-float32" \
    --against "$runs/eager-float32" --methods vanilla
for run in graphs-float32 graphs-bfloat16 eager-float32 batch-bfloat16; do
    step 40 "check $run" $py -m specbench check "$runs/$run"
done
# F. the host's work per decode step outside the forwards on this machine's CPU (issue 62's measure, on the host a GPU
#    user has): vanilla and eagle with a fixed tree of 16 at OVERHEAD_SIZES rows; $OUT/overhead/overhead.md. Graphs
#    off: a replayed graph is no module call, so with graphs on the wait for it would count as host time
#    (docs/measuring.md); uncaptured, every forward is one, timed until the device has run it.
step 60 "host work per step" $py -m specbench bench --overhead --methods vanilla,eagle@total_tokens=16 \
    --kernels stock --graphs off --device "$DEVICE" --batch-size "$OVERHEAD_SIZES" --out "$OUT/overhead"
for runtime in graphs eager; do  # --graphs on, and --kernels stock --graphs off
    choice=(--graphs on); [ "$runtime" = graphs ] || choice=(--kernels stock --graphs off)
    step 50 "synthetic $SHAPE $runtime" $py -m specbench run --target "shape:$SHAPE" \
        --synthetic-acceptance 0.8,0.6,0.4 --methods vanilla,pld,eagle,medusa,hydra,sps,swift "${choice[@]}" \
        --dtype bfloat16 --device "$DEVICE" --question-dir "$QDIR" --tasks mt_bench,gsm8k --limit 1 \
        --max-new-tokens "$BATCH_TOKENS" --temperatures 0 --out "$runs/synthetic-$SHAPE-$runtime"
done
tar czf "$OUT/gpu-synthetic.tgz" -C "$runs" "synthetic-$SHAPE-graphs" "synthetic-$SHAPE-eager" 2>>"$LOG"
grep "^== \|identical\|DIFFER\|MISMATCH\|Error\|error\|passed\|failed" "$LOG" | tail -40
finish
