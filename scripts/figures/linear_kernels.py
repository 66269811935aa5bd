"""The target's decoder-layer products per kernel and row count on this machine: the table behind the runtime's
kernel rule (specbench/decode/runtime.py's KernelRule, measured per machine by specbench/run/kernel_rule.py over all
the target's products). Rounds interleave the kernels so that drift hits them alike; each cell is the fastest of all
rounds; "chosen" is what the measured rule's choice (F.linear unless beaten by its margin) makes of this table.

    python scripts/figures/linear_kernels.py [--target NAME] [--rounds 3]
"""
from __future__ import annotations

import argparse

import torch

from specbench.decode.costs import cpu_description
from specbench.decode.names import PRODUCT_KERNELS, Runtime
from specbench.decode.runtime import FewTokenLinear, fastest_seconds
from specbench.decode.target import load_model
from specbench.run.kernel_rule import choose

ROWS = [1, 2, 4, 8, 12, 16, 24, 32]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    target = load_model(args.target, runtime=Runtime(kernels="few-token", graphs="off"))
    model = target.model
    linears = [m for name, m in model.named_modules() if isinstance(m, FewTokenLinear) and ".layers." in f".{name}"]
    megabytes = sum(m.weight.numel() * m.weight.element_size() for m in linears) / 1e6
    kernels = [k for k in PRODUCT_KERNELS if k != "packed" or all(m.packed is not None for m in linears)]
    best: dict[tuple[str, int], float] = {}
    with torch.inference_mode():
        for _ in range(args.rounds):
            for rows in ROWS:
                inputs = [torch.randn(rows, m.in_features, dtype=model.dtype) for m in linears]
                for kernel in kernels:
                    if kernel == "pair" and rows != 1:
                        continue
                    seconds = fastest_seconds(lambda: [m.product(x, kernel) for m, x in zip(linears, inputs)],
                                              model.device, 3)
                    best[kernel, rows] = min(best.get((kernel, rows), seconds), seconds)
    print(f"{args.target}: {len(linears)} decoder-layer products, {megabytes:.0f} MB of weights; {cpu_description()}; "
          f"{torch.get_num_threads()} threads; fastest of {args.rounds} rounds x 3, ms")
    print(f"{'rows':<8}" + "".join(f"{r:>7}" for r in ROWS))
    for kernel in kernels:
        print(f"{kernel:<8}" + "".join(f"{best[kernel, r] * 1000:>7.1f}" if (kernel, r) in best else f"{'-':>7}"
                                       for r in ROWS))
    print(f"{'chosen':<8}" + "".join(f"{choose({k: best[k, r] for k in kernels if (k, r) in best}):>7}"
                                     for r in ROWS))


if __name__ == "__main__":
    main()
