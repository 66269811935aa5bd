#!/usr/bin/env bash
# Remake tests/fixtures/conformance/eagle3.json: EAGLE-3's reference (EaModel.from_pretrained(use_eagle3=True) on a
# head folder in the published EAGLE-3 layout, at its own defaults total_token=60, depth=7, top_k=10, then
# EaModel.eagenerate at T=0), run unchanged (eagle3_reference.py) in a venv of transformers 4.53.1 (the oldest its
# requirements.txt allows) and torch 2.13.0 (the CPU build we have, for its 2.6.0), on the 8-layer tiny target, with
# the committed head (tests/fixtures/conformance/eagle3_head/; HEAD=distilled makes a new one and writes it there,
# about a minute on one CPU thread). Env: REFERENCE_REPO, CONFORMANCE_HOME, OUT (as pld.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/conformance/common.sh
URL=https://github.com/SafeAILab/EAGLE
COMMIT=cb7e0841fe0c206c6ed74a197ad5e2a1f13f5a2b  # the EAGLE-3 code as fetched, 2026-02-19
venv=$(reference_venv eagle3-tf4.53.1 torch==2.13.0 transformers==4.53.1)
repo=$(reference_repo "$URL" "$COMMIT")
ref=$(mktemp -d); trap 'rm -rf "$ref"' EXIT
git -C "$repo" archive "$COMMIT" eagle/__init__.py eagle/model | tar -x -C "$ref"
head=(--head-dir tests/fixtures/conformance/eagle3_head)
[ "${HEAD:-}" = distilled ] && head=(--save-head tests/fixtures/conformance/eagle3_head)
HF_HUB_OFFLINE=1 "$venv/bin/python" scripts/conformance/eagle3_reference.py --ref "$ref" --commit "$COMMIT" \
    --tokens 96 --work "$ref/work" "${head[@]}" --out "${OUT:-tests/fixtures/conformance/eagle3.json}"
