#!/usr/bin/env bash
# Remake tests/fixtures/conformance/suffix.json: SuffixDecoding's reference (arctic-inference's SuffixDecodingCache,
# the authors' code that vLLM's suffix decoding calls), run unchanged (suffix_reference.py drives it as vLLM's
# proposer does). Its suffix-tree extension is built from the package's sdist (pip download: it has no wheel for this platform; cmake, a
# C++20 compiler and nanobind, as its setup.py builds it; the CUDA ops beside it are not needed) into a venv of its
# own with torch 2.13.0 and transformers 4.57.1 for the tiny target. Env: CONFORMANCE_HOME, OUT (as pld.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/conformance/common.sh
VERSION=0.3.0
venv=$(reference_venv suffix-arctic$VERSION torch==2.13.0 transformers==4.57.1 nanobind numpy)
pkg="$CONFORMANCE_HOME/suffix-arctic$VERSION/reference"
if [ ! -d "$pkg/arctic_inference/suffix_decoding" ]; then
    src=$(mktemp -d); trap 'rm -rf "$src"' EXIT
    "$venv/bin/pip" download -q --no-deps --no-build-isolation -d "$src" "arctic-inference==$VERSION" >&2
    tar -xzf "$src/arctic_inference-$VERSION.tar.gz" -C "$src"
    tree="$src/arctic_inference-$VERSION"
    cmake -S "$tree/csrc/suffix_decoding" -B "$src/build" -DPython_EXECUTABLE="$venv/bin/python" \
        -DCMAKE_BUILD_TYPE=Release >&2
    cmake --build "$src/build" -j2 >&2
    mkdir -p "$pkg/arctic_inference/suffix_decoding"
    cp "$tree/arctic_inference/__init__.py" "$pkg/arctic_inference/"
    cp "$tree"/arctic_inference/suffix_decoding/*.py "$src"/build/_C*.so "$pkg/arctic_inference/suffix_decoding/"
fi
PYTHONPATH="$pkg" HF_HUB_OFFLINE=1 "$venv/bin/python" scripts/conformance/suffix_reference.py --version "$VERSION" \
    --tokens 96 --out "${OUT:-tests/fixtures/conformance/suffix.json}"
