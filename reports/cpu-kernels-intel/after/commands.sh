#!/bin/bash
# What made this folder: the bench before (6f13d18, the EPYC's fixed rule) and after (ed73389, the rule measured
# here, then transformers' kernels), one after the other. Run from the repository root, in the project environment,
# with a clone of this repository at 6f13d18 in /tmp/kr-before. (It ran as a copy of this script kept outside the
# repository, with this folder's absolute path for $out.)
set -u
out=$(realpath reports/cpu-kernels-intel/after)
cd /tmp
export HF_HUB_OFFLINE=1 SPECBENCH_CACHE=/tmp/kr-cache2
rm -rf /tmp/kr-cache2  # a fresh cache: the first bench after the change measures the rule
: > "$out/load.txt"
run() {  # name, then the bench's arguments
  local name=$1; shift
  echo "before $name: $(uptime)" >> "$out/load.txt"
  python -m specbench bench --limit 1 --max-new-tokens 64 "$@" > "$out/$name.txt" 2> "/tmp/kr-$name.err"
  echo "exit $name: $?" >> "$out/load.txt"
}
PYTHONPATH=/tmp/kr-before run bench-6f13d18-few-token
run bench-ed73389-measured
run bench-ed73389-stock --kernels stock
python -m specbench costs show > "$out/costs-show.txt"
cp /tmp/kr-cache2/kernels/*.json "$out/kernel-rule.json"
echo "after: $(uptime)" >> "$out/load.txt"
