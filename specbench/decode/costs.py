"""Timing a forward on this machine as the engine runs it: the target's tree-masked verification curve (what the
run's fixed cost model holds, specbench.decode.cost_model; a run measures it in checked rounds,
specbench.run.cost_rounds and run.decoder) and the machine's description that goes with every timing."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from transformers import PreTrainedModel

from specbench.decode.cost_model import CostCurve
from specbench.decode.draft import Draft
from specbench.decode.inputs import Blocks, row_blocks, stage_inputs, staged_forward
from specbench.decode.layout import AttentionLayout
from specbench.decode.runner import ModelRunner
from specbench.decode.runtime import fastest_seconds

CONTEXT = 256  # cached context tokens before the measured forward


def cpu_description() -> str:
    """CPU model and the SIMD flags that decide fp32 GEMM speed (timings are only comparable on equal ones)."""
    model, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown CPU":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        import platform

        model = platform.processor() or platform.machine()
    simd = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "neon") if f in flags]
    return f"{model} [{' '.join(simd) or 'no AVX2'}]"


def bushy_tree(tokens: list[int]) -> Draft:
    """A binary tree over tokens (node i > 0 hangs under node (i - 1) // 2), the kind of shape verification sees."""
    return Draft(list(tokens), [(i - 1) // 2 if i > 0 else -1 for i in range(len(tokens))])


def measure_forward_curve(model: PreTrainedModel, sizes: list[int], tree: bool, repeats: int = 5,
                          context: int = CONTEXT, runner: ModelRunner | None = None) -> CostCurve:
    """Fastest of `repeats` forwards over n new tokens after a cached context, for each n (after one warm-up).
    tree=True: one pending token and n - 1 tree nodes under the engine's 4D tree mask (what verification runs);
    tree=False: n tokens of a chain. The minimum is the least load-sensitive statistic. runner: the target's, where
    the run decodes on it (its shapes, captured on CUDA)."""
    timed = forward_timer(runner or ModelRunner(model, fixed_shapes=False), tree, repeats, context)
    return CostCurve(list(sizes), [timed(n) for n in sizes])


def forward_timer(runner: ModelRunner, tree: bool, repeats: int, context: int = CONTEXT) -> Callable[[int], float]:
    """time(n): the fastest of `repeats` forwards over n new tokens (after one untimed) written after a context
    cached once here in row 0 of the runner's cache, as the engine runs them (each forward writes the same slots
    again: nothing to undo)."""
    model = runner.model
    device, layout = model.device, AttentionLayout.of(model.config)
    gen = torch.Generator().manual_seed(0)

    def forward(block: Blocks, start: int, keep: int) -> Callable[[], object]:
        shape = runner.fit(1, block.lengths[0], start)
        staged = stage_inputs(block, [start], shape, device)
        return lambda: staged_forward(runner, staged, shape.tokens if shape.captured else keep, False, model.dtype,
                                      layout)

    prompt = torch.randint(0, model.config.vocab_size, (context,), generator=gen).tolist()
    with torch.inference_mode():
        forward(Blocks.chains([prompt], [0]), 0, 1)()

    @torch.inference_mode()
    def timed(n: int) -> float:
        tokens = torch.randint(0, model.config.vocab_size, (n,), generator=gen).tolist()
        block = row_blocks([tokens[:1]], [bushy_tree(tokens[1:])], [context]) if tree else Blocks.chains([tokens], [context])
        return fastest_seconds(forward(block, context, n), device, repeats)

    return timed
