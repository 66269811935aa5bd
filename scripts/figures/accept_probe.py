"""Token ids and accept lengths of each method on a target at T=0, one batch of prompts, as JSON on stdout: the probe
scripts/figures/accept_before_after.py runs at two revisions (each with its own tree first on PYTHONPATH; only the
public API, specbench.api, is used, so both revisions answer the same calls).
Usage: python scripts/figures/accept_probe.py --runtime fast --methods vanilla,eagle@total_tokens=12 [--target NAME]
       [--max-new-tokens 48]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead_probe import bind_tree, method_options  # noqa: E402  (a script beside this one)

PROMPTS = ("Write a short poem about the sea.", "What is 17 times 23? Explain step by step.", "def fibonacci(n):")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--runtime", default="fast")
    parser.add_argument("--methods", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()
    torch.set_num_threads(1)
    specbench = bind_tree()
    from specbench import api

    target = api.load_target(args.target, runtime=args.runtime)
    rows = {}
    for spec in args.methods.split(","):
        name, options = method_options(spec)
        results = api.generate(target, api.load_method(name, target, **options), list(PROMPTS),
                               max_new_tokens=args.max_new_tokens)
        rows[spec] = [{"token_ids": r.token_ids, "accept_lengths": r.accept_lengths} for r in results]
    print(json.dumps({"tree": str(Path(specbench.__file__).resolve().parent.parent), "runtime": args.runtime,
                      "target": args.target, "prompts": list(PROMPTS), "methods": rows}))


if __name__ == "__main__":
    main()
