#!/usr/bin/env bash
# The mutation pass over the verification and sampling code (issue 43), with cosmic-ray:
#   every mutant of specbench/decode/verify.py, specbench/decode/sampling.py and the engine's emission rule (emitted_tokens) runs
#   against the focused tests in cosmic-ray.toml; filter.py skips mutants in annotations and outside that scope;
#   report.py writes reports/mutation/ (README.md, mutants.csv) and exits 1 when a mutant survives that
#   equivalent.yaml does not explain.
# Usage: bash scripts/mutation/run.sh [SESSION]   (default results/mutation/session.sqlite; about 40 min on 2 cores)
#        RESUME=1 bash scripts/mutation/run.sh [SESSION]   continues an interrupted session
# Needs: pip install cosmic-ray (the project's [mutation] extra). Mutants are written in place and restored, so the
# mutated files must have no uncommitted changes.
set -euo pipefail
cd "$(dirname "$0")/../.."
session=${1:-results/mutation/session.sqlite}
files=(specbench/decode/verify.py specbench/decode/sampling.py specbench/decode/engine.py)
if ! git diff --quiet -- "${files[@]}"; then
    echo "run.sh: error: uncommitted changes in ${files[*]} (mutants are written in place); commit or stash them" >&2
    exit 2
fi
mkdir -p "$(dirname "$session")"
rm -rf specbench/__pycache__  # no stale bytecode of an unmutated file
started=$(date +%s)
if [[ -z "${RESUME:-}" || ! -f "$session" ]]; then
    rm -f "$session"
    cosmic-ray init scripts/mutation/cosmic-ray.toml "$session"
    python scripts/mutation/filter.py "$session"
fi
# One thread: the focused tests use tiny tensors, and two test processes' thread pools must not fight for 2 cores.
OMP_NUM_THREADS=1 cosmic-ray exec scripts/mutation/cosmic-ray.toml "$session"
if ! git diff --quiet -- "${files[@]}"; then
    echo "run.sh: error: a mutant was left in the working tree; 'git checkout -- specbench/' restores it" >&2
    exit 2
fi
python scripts/mutation/report.py "$session" --seconds $(( $(date +%s) - started ))
