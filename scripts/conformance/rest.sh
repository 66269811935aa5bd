#!/usr/bin/env bash
# Is REST's retrieval deterministic? Runs rest_search.py with the draftretriever wheel FasterDecoding/REST ships
# (Python 3.9, as the wheel is built; it installs unchanged), in a venv of its own. Writes
# reports/conformance-rest/rest_search.json (OUT to change). Env: REFERENCE_REPO, CONFORMANCE_HOME, PYTHON39 (a
# Python 3.9 interpreter; default python3.9).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/conformance/common.sh
URL=https://github.com/FasterDecoding/REST
COMMIT=50a5fc197382ed8df5b3e946dad2f8337511b541  # 2024-11-28
repo=$(reference_repo "$URL" "$COMMIT")
venv="$CONFORMANCE_HOME/rest-draftretriever0.1.0"
if [ ! -x "$venv/bin/python" ]; then
    "${PYTHON39:-python3.9}" -m venv "$venv" >&2
    wheel=$(mktemp -d)/draftretriever-0.1.0-cp39-cp39-manylinux_2_34_x86_64.whl
    git -C "$repo" show "$COMMIT:DraftRetriever/wheels/$(basename "$wheel")" > "$wheel"
    "$venv/bin/pip" install -q "$wheel" >&2
fi
"$venv/bin/python" scripts/conformance/rest_search.py --out "${OUT:-reports/conformance-rest/rest_search.json}"
