# Sourced by the device scripts (gpu_checks.sh, train_fair_4m.sh, train_gemma3.sh): logging, time-limited steps, the
# setup that turns what the carried folders brought (scripts/device/README.md) into an installed specbench, and the
# way trained heads come back. Needs KEEP and LOG (and OUT for send_back).
say() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$LOG"; }
LIMIT_SCALE=${LIMIT_SCALE:-1}  # every step's limit times this (the CPU rehearsal's slower machine: rehearse.sh)
FAILED=()  # the steps that did not exit 0
step() {  # step SECONDS NAME COMMAND...: run with a limit (times LIMIT_SCALE), log; returns its exit status (a script
    # goes on past a failed step, except where nothing after it could work: `step ... || stop`)
    local limit=$(($1 * LIMIT_SCALE)) name=$2; shift 2
    say "$name (limit ${limit}s): $*"
    local t0=$SECONDS rc=0
    timeout -k 5 "$limit" "$@" >>"$LOG" 2>&1 || rc=$?
    say "$name: exit $rc after $((SECONDS - t0))s$([ $rc = 124 ] && echo ' (cut by its limit)')"
    [ $rc = 0 ] || FAILED+=("$name (exit $rc)")
    return $rc
}
stop() { say "stopping: nothing after the failed step can work"; finish; exit 1; }
finish() {  # the summary; exit status 1 when any step failed (the rehearsal fails on it)
    if [ ${#FAILED[@]} -gt 0 ]; then say "FAILED steps: ${FAILED[*]}"; return 1; fi
    say "every step exited 0"
}
device_setup() {  # SECONDS: the setup as a step of its own (scripts/device/setup.sh); exports what later steps need
    export KEEP PYTHONPATH="$KEEP/site" SPECBENCH_CACHE="$KEEP/cache"  # setup.sh reads KEEP
    step "$1" setup bash scripts/device/setup.sh
}
send_back() {  # send_back NAME FOLDER...: those folders of heads/ (weights, configs, logs; no optimizer state) as
    # $OUT/NAME.tar.part*, each under $OUT's 16 MiB per file; here: cat NAME.tar.part* | tar xf - -C heads
    local name=$1; shift
    local present=(); for f in "$@"; do [ -e "heads/$f" ] && present+=("$f"); done
    rm -f "$OUT/$name".tar.part*
    [ ${#present[@]} -gt 0 ] || return 0
    (cd heads && tar cf - --exclude checkpoint.pt --exclude snapshots --exclude draft_vocab.pt --exclude '*.tmp*' \
        "${present[@]}") | split -b 15m - "$OUT/$name.tar.part"
    say "sent back: ${present[*]}"
}
device_resume() {  # a later call on the same warm machine: what device_setup installed is in $KEEP; the tree is new
    export KEEP PYTHONPATH="$KEEP/site" SPECBENCH_CACHE="$KEEP/cache"  # setup.sh reads KEEP
    if [ ! -d "$KEEP/site" ]; then FAILED+=("resume: no $KEEP/site (the machine went cold since the setup call)"); return 1; fi
    if [ -d "$KEEP/heads" ]; then mkdir -p heads && cp -r "$KEEP"/heads/. heads/; fi
}
runtime_questions() {  # the GPU-runtime calls' B=1 questions, one definition for gpu_runtime.sh's graphs runs and
    # gpu_runtime_checks.sh's eager run (the identity check compares them): sets `questions` (run arguments)
    LIMIT=${LIMIT:-1}; TOKENS=${TOKENS:-128}; TASKS=${TASKS:-mt_bench,gsm8k}
    questions=(--device "$DEVICE" --question-dir "$QDIR" --temperatures 0 --tasks "$TASKS" --limit "$LIMIT"
               --max-new-tokens "$TOKENS")
}
