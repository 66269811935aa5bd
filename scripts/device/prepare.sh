#!/usr/bin/env bash
# Build .dev1/ .dev2/ .dev3/ .dev4/ for the device scripts (scripts/device/README.md): what the device machine needs
# beyond the code, in four folders that each fit one call. Run from the repository root, with ../shared/data present.
# Env: DEST (where the folders go; the repository root), WHEEL_PYTHON (the Python the wheels are for: the device's
# 3.12; the CPU rehearsal, rehearse.sh, asks for this machine's).
set -euo pipefail
DEST=${DEST:-.}; WHEEL_PYTHON=${WHEEL_PYTHON:-3.12}
target=smollm2-135m-instruct
gguf=$(python -c "from specbench.decode.target import resolve; f, kw = resolve('$target'); print(f + '/' + kw['gguf_file'])")
if [ "$DEST" = . ]; then  # the checkout: the folders must stay out of git (and so travel only when carried)
    exclude=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$exclude")"
    grep -q '^/.dev4/' "$exclude" 2>/dev/null || printf '/.dev1/\n/.dev2/\n/.dev3/\n/.dev4/\n/.keep/\n' >> "$exclude"
fi
rm -rf "$DEST"/.dev[1-4]; mkdir -p "$DEST/.dev1" "$DEST/.dev2/whl" "$DEST/.dev2/heads/data" "$DEST/.dev3" "$DEST/.dev4"
head -c 64000000 "$gguf" > "$DEST/.dev1/gguf.part1"
tail -c +64000001 "$gguf" > "$DEST/.dev2/gguf.part2"
# What the image lacks (transformers 5.24: it has 5.17; gguf; pydivsufsort) and pytest with what it needs, so that
# the CUDA tests run whatever the image holds.
python -m pip download -q --no-deps --only-binary=:all: --python-version "$WHEEL_PYTHON" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$DEST/.dev2/whl" transformers==5.24.0 gguf==0.19.0 pydivsufsort==0.0.20 pytest==9.2.0 pluggy==1.7.0 \
    iniconfig==2.3.1
cp -r "heads/data/$target" "$DEST/.dev2/heads/data/"
gzip -c ../shared/data/train/prompts.jsonl > "$DEST/.dev2/prompts.jsonl.gz"
# The default drafters as the wheel ships them (setup.py's shipped_heads): heads/ itself, and per method the DEFAULT
# pointer and the json/safetensors files of the folder it names. They are more than one call takes (eight drafters,
# about 130 MB), so they go into .dev3 and .dev4, the largest first into the lighter of the two.
mkdir -p "$DEST/.dev3/heads"; cp heads/__init__.py heads/README.md "$DEST/.dev3/heads/"
cp -r ../shared/data/tasks "$DEST/.dev3/tasks"
drafter_files() {  # the files of the drafter a DEFAULT pointer names
    local folder; folder=$(dirname "$1")/$(cat "$1"); folder=${folder%/.}
    git ls-files "$folder" | grep -E "^$folder/[^/]+\.(json|jsonl|safetensors)$"
}
for default in $(for d in heads/*/"$target"/DEFAULT; do
                     echo "$(drafter_files "$d" | xargs du -cb | tail -1 | cut -f1) $d"; done | sort -rn | cut -d' ' -f2); do
    lighter=.dev3; [ "$(du -sb "$DEST/.dev4" | cut -f1)" -lt "$(du -sb "$DEST/.dev3" | cut -f1)" ] && lighter=.dev4
    mkdir -p "$DEST/$lighter/$(dirname "$default")"; cp "$default" "$DEST/$lighter/$default"
    drafter_files "$default" | while read -r f; do mkdir -p "$DEST/$lighter/$(dirname "$f")"; cp "$f" "$DEST/$lighter/$f"; done
done
du -sb "$DEST"/.dev[1-4]
