#!/usr/bin/env bash
# Remake tests/fixtures/conformance/sps.json: Spec-Bench's SpS (evaluation/inference_sps.py: sps_forward, i.e.
# transformers' assisted generation `model.generate(..., assistant_model=drafter)` with Spec-Bench's
# model/sps/decoding.py assisted_decoding set in as its __main__ does), run unchanged (sps_reference.py) in a venv of
# the version Spec-Bench's requirements.txt pins (transformers==4.37.1; torch 2.13.0), with the committed draft
# (tests/fixtures/conformance/sps_draft/: config.json + model.safetensors; DRAFTER=distilled makes a new one,
# sps_reference.py says how, ~1-2 min of one CPU thread). Env: REFERENCE_REPO, CONFORMANCE_HOME, OUT (as pld.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/conformance/common.sh
URL=https://github.com/hemingkx/Spec-Bench
COMMIT=fd2c1cd7d2201ef71db4c5f4e455008f017967bf
venv=$(reference_venv sps-tf4.37.1 torch==2.13.0 transformers==4.37.1)
repo=$(reference_repo "$URL" "$COMMIT")
ref=$(mktemp -d); trap 'rm -rf "$ref"' EXIT
git -C "$repo" archive "$COMMIT" evaluation model/sps | tar -x -C "$ref"
drafter=(--draft-dir tests/fixtures/conformance/sps_draft)
[ "${DRAFTER:-}" = distilled ] && drafter=(--draft-out tests/fixtures/conformance/sps_draft)
HF_HUB_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1 nice -n 10 "$venv/bin/python" scripts/conformance/sps_reference.py \
    --ref "$ref" --commit "$COMMIT" --tokens 96 "${drafter[@]}" --out "${OUT:-tests/fixtures/conformance/sps.json}"
