#!/usr/bin/env bash
# Build .dev1/ .dev2/ .dev3/ for gpu_checks.sh (scripts/device/README.md): what the device machine needs beyond the
# code, in three folders that each fit one call. Run from the repository root, with ../shared/data present.
set -euo pipefail
gguf=$(python -c "from specbench.decode.target import resolve; f, kw = resolve('smollm2-135m-instruct'); print(f + '/' + kw['gguf_file'])")
exclude=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$exclude")"
grep -q '^/.dev1/' "$exclude" 2>/dev/null || printf '/.dev1/\n/.dev2/\n/.dev3/\n/.keep/\n' >> "$exclude"
rm -rf .dev1 .dev2 .dev3; mkdir -p .dev1 .dev2/whl .dev2/heads/data .dev3
head -c 64000000 "$gguf" > .dev1/gguf.part1
tail -c +64000001 "$gguf" > .dev2/gguf.part2
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .dev2/whl \
    transformers==5.24.0 gguf==0.19.0 pydivsufsort==0.0.20
cp -r heads/data/smollm2-135m-instruct .dev2/heads/data/
gzip -c ../shared/data/train/prompts.jsonl > .dev2/prompts.jsonl.gz
# the default drafters: the files the wheel ships (pyproject's package-data for specbench.heads)
for f in eagle/smollm2-135m-instruct/self-t0-12m eagle3/smollm2-135m-instruct medusa/smollm2-135m-instruct \
         hydra/smollm2-135m-instruct/fair-4m sps/smollm2-135m-instruct; do
    mkdir -p ".dev3/heads/$f"
    git ls-files "heads/$f" | grep -E "^heads/$f/[^/]+\.(json|jsonl|safetensors)$" | xargs -I{} cp {} ".dev3/heads/$f/"
done
cp -r ../shared/data/tasks .dev3/tasks
du -sb .dev1 .dev2 .dev3
