#!/usr/bin/env bash
# Remake tests/fixtures/conformance/eagle.json: EAGLE-2's reference (EaModel.from_pretrained on an EAGLE-1/2 head
# folder in the published layout, then EaModel.eagenerate at T=0 with total_token=60, depth=5, top_k=10, the
# settings of the reference's evaluation scripts), run unchanged (eagle_reference.py) in a venv of the versions its
# requirements.txt pins (transformers 4.36.2; torch 2.13.0, the CPU build we have, for its 2.0.1), with the committed
# head (tests/fixtures/conformance/eagle_head/: config.json + model.safetensors; HEAD=distilled makes a new one and
# writes it there, eagle_reference.py says how, about 10 minutes on one CPU thread). Env: REFERENCE_REPO,
# CONFORMANCE_HOME, OUT (as pld.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/conformance/common.sh
URL=https://github.com/SafeAILab/EAGLE
COMMIT=bfeb532e689a3db4e1a9081c7c83219c9385e84a  # "EAGLE-2", 2024-06-27
venv=$(reference_venv eagle-tf4.36.2 torch==2.13.0 transformers==4.36.2)
repo=$(reference_repo "$URL" "$COMMIT")
ref=$(mktemp -d); trap 'rm -rf "$ref"' EXIT
git -C "$repo" archive "$COMMIT" eagle/__init__.py eagle/model | tar -x -C "$ref"
head=(--head-dir tests/fixtures/conformance/eagle_head)
[ "${HEAD:-}" = distilled ] && head=(--save-head tests/fixtures/conformance/eagle_head)
HF_HUB_OFFLINE=1 "$venv/bin/python" scripts/conformance/eagle_reference.py --ref "$ref" --commit "$COMMIT" \
    --tokens 96 --work "$ref/work" "${head[@]}" --out "${OUT:-tests/fixtures/conformance/eagle.json}"
