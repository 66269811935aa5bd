"""A trained drafter's folder again with its weights in float16, for the wheel: the same training record
(config.json, train.json, log.jsonl), half the bytes. The loaders upcast to the target's dtype, so the copy drafts
as its source up to fp16 rounding of the weights; verification stays lossless either way. config.json records the
source folder and the cast under "specbench_copied_from".

    python scripts/half_precision_copy.py heads/dflash/smollm2-135m-instruct/fair-640k \
        heads/dflash/smollm2-135m-instruct/fair-640k-fp16
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

RECORDS = ("train.json", "log.jsonl")  # copied as they are: what the drafter was trained on, and how


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("copy", type=Path)
    args = parser.parse_args()
    weights = args.source / "model.safetensors"
    if not weights.is_file():
        print(f"half_precision_copy: {weights}: no such file", file=sys.stderr)
        return 2
    args.copy.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.half() if v.is_floating_point() else v for k, v in load_file(str(weights)).items()}
    save_file(tensors, str(args.copy / "model.safetensors"))
    config = json.loads((args.source / "config.json").read_text(encoding="utf-8"))
    config["specbench_copied_from"] = {"folder": args.source.as_posix(), "weights": str(torch.float16)}
    (args.copy / "config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    for name in RECORDS:
        if (args.source / name).is_file():
            shutil.copyfile(args.source / name, args.copy / name)
    print(f"{args.copy}: {(args.copy / 'model.safetensors').stat().st_size / 1e6:.1f} MB "
          f"(from {weights.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
