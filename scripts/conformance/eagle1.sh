#!/usr/bin/env bash
# Remake tests/fixtures/conformance/eagle1.json: EAGLE-1's reference (the last EAGLE-1 code: EaModel.from_pretrained
# on an EAGLE-1/2 head folder in the published layout, then EaModel.eagenerate at T=0 with its default tree,
# choices.mc_sim_7b_63), run unchanged (eagle1_reference.py) in the venv of EAGLE-2's trace (its requirements.txt pins
# the same transformers 4.36.2; torch 2.13.0, the CPU build we have, for its 2.0.1), with the committed head of the
# EAGLE-2 trace (tests/fixtures/conformance/eagle_head/). Env: REFERENCE_REPO, CONFORMANCE_HOME, OUT (as pld.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/conformance/common.sh
URL=https://github.com/SafeAILab/EAGLE
COMMIT=2320d52e443672367a7b8447160f81af8318d1b1  # the last EAGLE-1 code before EAGLE-2, 2024-04-11
venv=$(reference_venv eagle-tf4.36.2 torch==2.13.0 transformers==4.36.2)
repo=$(reference_repo "$URL" "$COMMIT")
ref=$(mktemp -d); trap 'rm -rf "$ref"' EXIT
git -C "$repo" archive "$COMMIT" eagle/__init__.py eagle/model | tar -x -C "$ref"
HF_HUB_OFFLINE=1 "$venv/bin/python" scripts/conformance/eagle1_reference.py --ref "$ref" --commit "$COMMIT" \
    --tokens 96 --work "$ref/work" --head-dir tests/fixtures/conformance/eagle_head \
    --out "${OUT:-tests/fixtures/conformance/eagle1.json}"
