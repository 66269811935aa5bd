#!/usr/bin/env bash
# Remake tests/fixtures/conformance/pard.json: AMD's PARD reference (AMD-AGI/PARD, pard/pard_infer.py: PardInfer with
# para=True, its model_init and its generate loop, the README's "Eval With Transformers+" PARD-1 path, draft_k 12 as
# its default), run unchanged (pard_reference.py) in a venv of the version its requirement.txt pins
# (transformers==4.51.3; torch 2.13.0; click, loguru and numpy==1.26.4, which pard_infer.py imports), with the
# committed draft (tests/fixtures/conformance/pard_draft/: AMD's published layout, config.json with pard_token and
# spd_type + model.safetensors; DRAFTER=distilled makes a new one, ~7.5 min of one CPU thread).
# Env: REFERENCE_REPO, CONFORMANCE_HOME, OUT (as pld.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/conformance/common.sh
URL=https://github.com/AMD-AGI/PARD
COMMIT=6f279bf3f1680e0b5d71c562ca5b91bdeef4c038
venv=$(reference_venv pard-tf4.51.3 torch==2.13.0 transformers==4.51.3 click loguru numpy==1.26.4)
repo=$(reference_repo "$URL" "$COMMIT")
ref=$(mktemp -d); trap 'rm -rf "$ref"' EXIT
git -C "$repo" archive "$COMMIT" pard | tar -x -C "$ref"
drafter=(--draft-dir tests/fixtures/conformance/pard_draft)
[ "${DRAFTER:-}" = distilled ] && drafter=(--draft-out tests/fixtures/conformance/pard_draft)
HF_HUB_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1 nice -n 10 "$venv/bin/python" scripts/conformance/pard_reference.py \
    --ref "$ref" --commit "$COMMIT" --tokens 96 --work "$ref/work" "${drafter[@]}" \
    --out "${OUT:-tests/fixtures/conformance/pard.json}"
