#!/usr/bin/env bash
# "Nothing regresses on the CPU" (reports/cpu-regression/): the same two benchmarks on an earlier commit (BASE, a
# git worktree of it) and on this tree, one after the other on the same machine:
#   1. `specbench bench` (our vanilla and pld against HF generate, interleaved; 2 questions per task, 128 tokens);
#   2. the fair report's T=0 run (reports/fair/settings-T0.yaml, its methods and heads) on LIMIT questions per task.
# compare.md puts each tree's figures side by side (speedups are ratios within one tree's run).
# Usage: [BASE=8acdfea] [LIMIT=1] [QDIR=data/tasks] [PYTHON=python] [METHODS=m1,m2 TAG=name ORDER="head base"]
#        [EXTRA="--cost-curve /abs/run.json"] bash scripts/figures/cpu_regression.sh
# EXTRA: more `run` arguments for both trees (e.g. one cost curve for both, so that cost-sized trees are sized alike).
# Run it on an otherwise idle machine: the two trees are timed minutes apart. METHODS (with TAG, its folder under
# reports/cpu-regression/) reruns some of the methods without the bench; ORDER runs the trees the other way round.
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1
HERE=$(pwd)
PY=${PYTHON:-python}
BASE=${BASE:-8acdfea}
LIMIT=${LIMIT:-1}
QDIR=$(realpath "${QDIR:-data/tasks}")
OUT=$HERE/reports/cpu-regression${TAG:+/$TAG}
ORDER=${ORDER:-base head}
TREE=${TMPDIR:-/tmp}/specbench-base-$BASE
[[ -d $TREE ]] || git worktree add --detach "$TREE" "$BASE" >/dev/null 2>&1
# The trained heads are not tracked: the base tree reads this checkout's (the methods name them by relative paths).
[[ -e $TREE/heads ]] || ln -s "$HERE/heads" "$TREE/heads"
# The base tree's own environment: this one's packages, its own code (an editable install maps its package data).
BPY=$TREE/.venv/bin/python
if [[ ! -x $BPY ]]; then
  "$PY" -m venv "$TREE/.venv"
  "$PY" -c "import site; print(site.getsitepackages()[0])" > "$("$BPY" -c 'import site; print(site.getsitepackages()[0])')/base.pth"
  "$BPY" -m pip install -q --no-deps --no-build-isolation -e "$TREE"
fi
H=heads; T=smollm2-135m-instruct; E=$H/eagle/$T/equal-data
ALL="vanilla,pld,recycling,suffix,samd,swift,sps@head=$H/sps/$T/fair-640k,medusa@head=$H/medusa/$T/fair-640k"
ALL="$ALL,hydra@head=$H/hydra/$T/fair-640k,eagle@head=$E,eagle3@head=$H/eagle3/$T-640k"
mkdir -p "$OUT"
for side in $ORDER; do
  dir=$HERE; py=$PY; [[ $side == base ]] && dir=$TREE && py=$BPY
  [[ -s $OUT/bench-$side.txt || -n ${METHODS:-} ]] || (cd "$dir" && "$py" -m specbench bench --limit 2 --question-dir "$QDIR" \
    2>/dev/null > "$OUT/bench-$side.txt")
done
for side in $ORDER; do
  dir=$HERE; py=$PY; [[ $side == base ]] && dir=$TREE && py=$BPY
  (cd "$dir" && "$py" -m specbench run --methods "${METHODS:-$ALL}" --settings "$HERE/reports/fair/settings-T0.yaml" \
    --tasks all --question-dir "$QDIR" --limit "$LIMIT" --max-new-tokens 128 --temperatures 0 ${EXTRA:-} \
    --out "$OUT/run-$side" --report-dir "$OUT/run-$side/report")
  rm -rf "$OUT/run-$side/report"
  # The tables from this tree's code and paths, so that `report --verify` remakes them from the records.
  "$PY" -m specbench report "${OUT#"$HERE"/}/run-$side" --report-dir "${OUT#"$HERE"/}/$side" --no-plots >/dev/null
done
"$PY" - "$OUT" <<'EOF'
import json
import sys
from pathlib import Path

import pandas as pd

out = Path(sys.argv[1])
base, head = (json.loads((out / f"run-{side}" / "run.json").read_text())["environment"]["git_commit"]
              for side in ("base", "head"))
lines = [f"# CPU regression check: {base} (base) against {head} (head)", "",
         "Made by `bash scripts/figures/cpu_regression.sh`. Each tree's figures come from its own run; compare "
         "the ratios, not the seconds.", "", "## bench (vanilla and pld against HF generate)", ""]
for side in ("base", "head"):
    bench = out / f"bench-{side}.txt"
    text = bench.read_text().strip().splitlines() if bench.is_file() else ["(not run: METHODS reruns some methods)"]
    lines += [f"{side}:", "", "```", *text[-11:], "```", ""]
tables = {side: pd.read_csv(out / side / "speedup_T0.csv", comment="#").set_index("method") for side in ("base", "head")}
both = pd.DataFrame({f"{side} {col}": tables[side][f"mean_{col}"] for side in ("base", "head") for col in ("speedup", "tau")})
lines += ["## The fair T=0 methods, mean over the tasks", "", both.round(3).to_markdown(), ""]


def seconds(values: list) -> float:
    return sum(sum(v) if isinstance(v, list) else v for v in values)


rows = {}
for side in ("base", "head"):
    for line in (out / f"run-{side}" / "records.jsonl").read_text().splitlines():
        record = json.loads(line)
        totals = rows.setdefault(record["method"], {}).setdefault(side, [0, 0.0, 0.0])
        for choice in record["choices"]:
            totals[0] += sum(choice["new_tokens"])
            totals[1] += seconds(choice["wall_time"])
            totals[2] += seconds(choice["verify_time"])
table = pd.DataFrame({method: {"base tok/s": by["base"][0] / by["base"][1], "head tok/s": by["head"][0] / by["head"][1],
                               "head/base": (by["head"][0] / by["head"][1]) / (by["base"][0] / by["base"][1]),
                               "base target s": by["base"][2], "head target s": by["head"][2]}
                      for method, by in rows.items()}).T
lines += ["## Tokens per second and seconds in the target's forwards (verification), per tree", "",
          "Both trees emit the same tokens (the same τ above); the target's forwards do the same work in both.", "",
          table.round(3).to_markdown(), ""]
(out / "compare.md").write_text("\n".join(lines))
print((out / "compare.md").read_text())
EOF
