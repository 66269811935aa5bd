#!/usr/bin/env bash
# Remake tests/fixtures/conformance/hydra.json (Hydra++ heads, prefix-mlp) and hydra_mlp.json (plain grounded MLP
# heads): Hydra's reference (HydraModel.from_pretrained on a head folder in the published layout: config.json +
# hydra_lm_head.pt, then hydra_generate at T=0 with its default tree mc_sim_7b_63), run unchanged
# (hydra_reference.py) in a venv of the versions it pins (pyproject.toml: transformers==4.36.2; torch 2.13.0), with
# the committed heads (tests/fixtures/conformance/hydra_heads/ and hydra_mlp_heads/: config.json +
# hydra_lm_head.safetensors; HEADS=distilled makes new ones there, hydra_reference.py says how). Env: REFERENCE_REPO,
# CONFORMANCE_HOME (as pld.sh), OUT_DIR (where the two traces go; default the fixtures folder).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/conformance/common.sh
URL=https://github.com/zankner/Hydra
COMMIT=3f39fbd2c22552e788b62dfd29a12b07ad63abfe
venv=$(reference_venv hydra-tf4.36.2 torch==2.13.0 transformers==4.36.2)
repo=$(reference_repo "$URL" "$COMMIT")
ref=$(mktemp -d); trap 'rm -rf "$ref"' EXIT
git -C "$repo" archive "$COMMIT" hydra | tar -x -C "$ref"
fix=tests/fixtures/conformance
for arch in prefix-mlp mlp; do
    name=hydra; [ "$arch" = mlp ] && name=hydra_mlp
    heads=(--heads-file "$fix/${name}_heads/hydra_lm_head.safetensors")
    [ "${HEADS:-}" = distilled ] && heads=(--heads distilled --save-heads "$fix/${name}_heads")
    HF_HUB_OFFLINE=1 "$venv/bin/python" scripts/conformance/hydra_reference.py --ref "$ref" --commit "$COMMIT" \
        --arch "$arch" --tokens 96 --work "$ref/work" "${heads[@]}" --out "${OUT_DIR:-$fix}/$name.json"
done
