#!/usr/bin/env bash
# The fair report in print (reports/fair/paper/): `specbench report` remakes the tables and figures of every fair run
# from its committed records (reports/fair/run-NAME -> reports/fair/NAME), then pdflatex compiles paper.tex, a
# two-column article that \input's the T=0 table (a table* float) and the leaderboard and includes the speedup figure.
# Needs pdflatex with booktabs (Debian: apt-get install texlive-latex-base texlive-latex-recommended).
# Usage: bash scripts/figures/paper.sh   -> reports/fair/paper/paper.pdf and paper.log (the log of the last pass)
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1
for name in T0 T1 4m-T0 4m-T1; do
  python -m specbench report reports/fair/run-"$name" --out reports/fair/"$name" > /dev/null
done
cd reports/fair/paper
rm -f paper.aux
for pass in 1 2; do  # twice: the second pass resolves the table and figure numbers
  pdflatex -interaction=nonstopmode -halt-on-error paper.tex > /dev/null || { tail -20 paper.log; exit 1; }
done
rm -f paper.aux
if grep -n "Overfull\|Error\|multiply defined" paper.log; then echo "paper.sh: a table or figure does not fit (paper.log)" >&2; exit 1; fi
echo "reports/fair/paper/paper.pdf: $(pdfinfo paper.pdf 2>/dev/null | grep -i '^pages' || echo built)"
