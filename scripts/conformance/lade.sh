#!/usr/bin/env bash
# Remake tests/fixtures/conformance/lade.json (and lade_pool_from_prompt.json): lookahead decoding's reference
# (hao-ai-lab/LookaheadDecoding, package `lade`), run unchanged (lade_reference.py) in a venv of the versions its
# requirements.txt pins (transformers 4.36.2, einops 0.7.0; torch 2.13.0 CPU instead of its torch<2.1.1, so the
# model is loaded with attn_implementation="eager"): USE_LADE=1, lade.augment_all(), lade.config_lade(LEVEL=5,
# WINDOW_SIZE=7, GUESS_SET_SIZE=7, DEBUG=0) as its README says, 4 prompts x 96 tokens, greedy. The second trace sets
# POOL_FROM_PROMPT=True (and DEBUG=1), as its minimal.py does. No drafter: lookahead decoding drafts with the target.
# Env: REFERENCE_REPO, CONFORMANCE_HOME (as pld.sh), OUT (the README trace), OUT_POOL (the POOL_FROM_PROMPT trace).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/conformance/common.sh
URL=https://github.com/hao-ai-lab/LookaheadDecoding
COMMIT=eed010da9c7b1867912675d480feec5629e0c2d0
venv=$(reference_venv lade-tf4.36.2 torch==2.13.0 transformers==4.36.2 einops==0.7.0)
repo=$(reference_repo "$URL" "$COMMIT")
ref=$(mktemp -d); trap 'rm -rf "$ref"' EXIT
git -C "$repo" archive "$COMMIT" lade | tar -x -C "$ref"
export HF_HUB_OFFLINE=1
out=${OUT:-tests/fixtures/conformance/lade.json}
out_pool=${OUT_POOL:-tests/fixtures/conformance/lade_pool_from_prompt.json}
nice -n 10 "$venv/bin/python" scripts/conformance/lade_reference.py --ref "$ref" --commit "$COMMIT" \
    --tokens 96 --work "$ref/work" --out "$out"
nice -n 10 "$venv/bin/python" scripts/conformance/lade_reference.py --ref "$ref" --commit "$COMMIT" \
    --tokens 96 --work "$ref/work" --pool-from-prompt --out "$out_pool"
