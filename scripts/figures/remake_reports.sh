#!/usr/bin/env bash
# Remake every committed report folder's tables (and its made_from.json `also` files: check.txt, step_times.md,
# paired_tau.txt) from the run it names, with the current code: after a change of the table code, run this, look
# at `git diff reports/`, and commit. Plots are left as they are (a plain `python -m specbench report RUN --out DIR`
# remakes them too). Then `python -m pytest tests/test_report_verify.py` passes again.
# Usage: bash scripts/figures/remake_reports.sh [REPORT_DIR ...]   (default: every committed reports/**/made_from.json)
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1
if [[ $# -gt 0 ]]; then
  folders=("$@")
else
  mapfile -t folders < <(git ls-files 'reports/**/made_from.json' | xargs -r -n1 dirname)
fi
for folder in "${folders[@]}"; do
  python -m specbench report --verify --fix "$folder"
done
