"""Measuring what a forward costs on this machine: the target's tree-masked verification curve (the run's fixed
cost model, specbench.decode.cost_model), the device's copy bandwidth (the report's roofline limit) and the
machine's description that goes with every timing."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from transformers import PreTrainedModel

from specbench.decode.cost_model import CostCurve, CostModel
from specbench.decode.cost_rounds import CostPlan, CostRounds, CostWatch, measure_curve
from specbench.decode.draft import Draft
from specbench.decode.inputs import Blocks, row_blocks, stage_inputs, staged_forward
from specbench.decode.layout import AttentionLayout
from specbench.decode.runner import ModelRunner
from specbench.decode.runtime import fastest_seconds

CONTEXT = 256  # cached context tokens before the measured forward
COPY_BYTES = 256 * 2**20  # the copy probe's tensor: far beyond any CPU's last-level cache and an H100's L2


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


@torch.inference_mode()
def measure_copy_bandwidth(device: torch.device, nbytes: int = COPY_BYTES, repeats: int = 5) -> float:
    """GB/s of the fastest of `repeats` copies of an nbytes tensor into another on the device, counting the bytes
    read and the bytes written (STREAM's "copy" convention), with the threads the run decodes with."""
    source = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dest = torch.empty_like(source)
    seconds = fastest_seconds(lambda: dest.copy_(source), device, repeats)
    return 2 * nbytes / seconds / 1e9


def probe_seconds(runner: ModelRunner, repeats: int = 3) -> float:
    """A quick T(1): the fastest of `repeats` tree-masked one-token forwards after the measurement's context (what a
    run compares its stored T(1) with as it starts)."""
    return forward_timer(runner, True, repeats, CONTEXT)(1)


def measure_cost_model(runner: ModelRunner, target: str, rounds: int = 3, watch: CostWatch | None = None,
                       plan: CostPlan | None = None) -> CostModel:
    """The run's verification curve, measured in interleaved rounds with the load read during them and checked
    before it may be kept (specbench.decode.cost_rounds; its Measurement says when, how, under what load and, where
    it failed its checks, why), on the target's runner (the shapes the run decodes at). watch: how the
    load is read, the samples kept and progress shown (default: no load reading, nothing kept, no progress). plan:
    how (default CostPlan with `rounds`)."""
    watch = watch or CostWatch()
    plan = plan or CostPlan(rounds=rounds)
    samples = watch.resume(plan)
    model = runner.model
    timed = forward_timer(runner, True, plan.repeats, CONTEXT)
    done = sum(x is not None for row in samples.seconds for x in row)
    with watch.progress(len(plan.sizes) * plan.rounds, done) as tick:
        curve, measured = measure_curve(CostRounds(plan, timed, watch, tick), samples)
    return CostModel(target, str(model.device), cpu_description(), curve, copy_gbps=measure_copy_bandwidth(model.device),
                     measured=measured)
