#!/usr/bin/env bash
# Remake tests/fixtures/conformance/pld.json: Saxena's prompt lookup decoding, run unchanged (pld_reference.py) in a
# venv of its era's versions (its notebook calls GenerationMixin._extend_attention_mask, which transformers 4.36
# removed: 4.35.2, with torch 2.13.0). Env: REFERENCE_REPO (a clone or mirror of the repository; default: clone
# it), CONFORMANCE_HOME (where the venv and clone go; default ~/.cache/specbench-conformance), OUT (the trace).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/conformance/common.sh
URL=https://github.com/apoorvumang/prompt-lookup-decoding
COMMIT=cada4fe6ec7368d41c386ec3fb94fa11268971eb
venv=$(reference_venv pld-tf4.35.2 torch==2.13.0 transformers==4.35.2)
repo=$(reference_repo "$URL" "$COMMIT")
notebook=$(mktemp --suffix=.ipynb); trap 'rm -f "$notebook"' EXIT
git -C "$repo" show "$COMMIT:demo-pld.ipynb" > "$notebook"
"$venv/bin/python" scripts/conformance/pld_reference.py --notebook "$notebook" --commit "$COMMIT" \
    --out "${OUT:-tests/fixtures/conformance/pld.json}"
