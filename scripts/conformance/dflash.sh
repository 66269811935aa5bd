#!/usr/bin/env bash
# Remake tests/fixtures/conformance/dflash.json: DFlash's reference (z-lab/dflash: DFlashDraftModel.from_pretrained on
# a drafter folder in the published z-lab layout, then DFlashDraftModel.spec_generate at T=0, block 16), run
# unchanged (dflash_reference.py) in a venv of the versions it pins (its pyproject's transformers extra:
# transformers==4.57.1; torch 2.13.0), with the committed drafter (tests/fixtures/conformance/dflash_drafter/:
# config.json + model.safetensors; DRAFTER=distilled makes a new one, dflash_reference.py says how, ~10 min on 2 shared CPUs).
# Env: REFERENCE_REPO, CONFORMANCE_HOME, OUT (as pld.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/conformance/common.sh
URL=https://github.com/z-lab/dflash
COMMIT=44947fbf71114e241c96de194f4b382b5dd330d0
venv=$(reference_venv dflash-tf4.57.1 torch==2.13.0 transformers==4.57.1)
repo=$(reference_repo "$URL" "$COMMIT")
ref=$(mktemp -d); trap 'rm -rf "$ref"' EXIT
git -C "$repo" archive "$COMMIT" dflash | tar -x -C "$ref"
drafter=(--drafter-file tests/fixtures/conformance/dflash_drafter/model.safetensors)
[ "${DRAFTER:-}" = distilled ] && drafter=(--drafter-out tests/fixtures/conformance/dflash_drafter)
HF_HUB_OFFLINE=1 nice -n 10 "$venv/bin/python" scripts/conformance/dflash_reference.py --ref "$ref" --commit "$COMMIT" \
    --tokens 96 --work "$ref/work" "${drafter[@]}" --out "${OUT:-tests/fixtures/conformance/dflash.json}"
