#!/usr/bin/env bash
# Remake tests/fixtures/conformance/medusa.json: Medusa's reference (MedusaModel.from_pretrained on a Medusa-1 head
# folder in the published layout, then medusa_generate at T=0 with its default tree mc_sim_7b_63), run unchanged
# (medusa_reference.py) in a venv of the versions it needs (transformers >= 4.34 and < 4.38: 4.36.2, torch 2.13.0),
# with the committed heads (tests/fixtures/conformance/medusa_heads.safetensors; HEADS=distilled makes new ones,
# medusa_reference.py says how). Also rewrites methods/common/medusa_trees.json from the same commit. Env:
# REFERENCE_REPO, CONFORMANCE_HOME, OUT (as pld.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/conformance/common.sh
URL=https://github.com/FasterDecoding/Medusa
COMMIT=e2a5d20c048a9b0a4092e6933c34313687422518
venv=$(reference_venv medusa-tf4.36.2 torch==2.13.0 transformers==4.36.2)
repo=$(reference_repo "$URL" "$COMMIT")
ref=$(mktemp -d); trap 'rm -rf "$ref"' EXIT
git -C "$repo" archive "$COMMIT" medusa | tar -x -C "$ref"
python3 scripts/conformance/medusa_trees.py --repo "$repo" --commit "$COMMIT"
heads=(--heads-file tests/fixtures/conformance/medusa_heads.safetensors)
[ "${HEADS:-}" = distilled ] && heads=(--heads distilled)
HF_HUB_OFFLINE=1 "$venv/bin/python" scripts/conformance/medusa_reference.py --ref "$ref" --commit "$COMMIT" \
    --tokens 96 --work "$ref/work" "${heads[@]}" --out "${OUT:-tests/fixtures/conformance/medusa.json}"
