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
from specbench.decode.inputs import batch_inputs, row_block, tree_inputs
from specbench.decode.kv import new_cache, truncate_cache
from specbench.decode.layout import AttentionLayout
from specbench.decode.runtime import fastest_seconds
from specbench.decode.static import BLOCK_SIZES, StaticTarget, bucket

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
                          context: int = CONTEXT, static: StaticTarget | None = None) -> CostCurve:
    """Fastest of `repeats` forwards over n new tokens after a cached context, for each n (after one warm-up).
    tree=True: one pending token and n - 1 tree nodes under the engine's 4D tree mask (what verification runs);
    tree=False: n tokens under the model's own causal mask. The minimum is the least load-sensitive statistic.
    static: the target's static runtime, where the run decodes on it (its padded shapes, captured on CUDA)."""
    timed = forward_timer(model, tree, repeats, context, static)
    return CostCurve(list(sizes), [timed(n) for n in sizes])


def forward_timer(model: PreTrainedModel, tree: bool, repeats: int, context: int = CONTEXT,
                  static: StaticTarget | None = None) -> Callable[[int], float]:
    """time(n): the fastest of `repeats` forwards over n new tokens (after one untimed) after a context cached once
    here, as measure_forward_curve times them; the cache is truncated back after each forward."""
    if static is not None:
        return static_forward_timer(static, tree, repeats, context)
    device = model.device
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    cache = new_cache()
    layout = AttentionLayout.of(model.config)
    with torch.inference_mode():
        model(input_ids=torch.randint(0, vocab, (1, context), generator=gen).to(device), cache=cache,
              use_cache=True, logits_to_keep=1)

    @torch.inference_mode()
    def timed(n: int) -> float:
        tokens = torch.randint(0, vocab, (n,), generator=gen).tolist()
        draft = bushy_tree(tokens[1:]) if tree else Draft()
        inputs = tree_inputs(tokens[:1] if tree else tokens, draft, context, model.dtype, device, layout)

        def forward() -> None:
            model(input_ids=inputs.input_ids, position_ids=inputs.position_ids,
                  attention_mask=inputs.attention_mask, cache=cache, use_cache=True, logits_to_keep=n)
            truncate_cache(cache, context)

        return fastest_seconds(forward, device, repeats)

    return timed


def static_forward_timer(static: StaticTarget, tree: bool, repeats: int, context: int) -> Callable[[int], float]:
    """forward_timer's forwards as the static runtime runs them: each block padded to its bucketed size, written
    after the cached context at fixed slots (nothing to truncate), replayed from its graph on CUDA."""
    model = static.model
    device, layout = model.device, AttentionLayout.of(model.config)
    gen = torch.Generator().manual_seed(0)
    static.reserve(1, context + BLOCK_SIZES[-1])

    def inputs(block, width: int, size: int) -> dict[str, torch.Tensor]:
        return batch_inputs([block], [width], width, model.dtype, device, layout, (1, size, static.capacity)).named()

    prompt = torch.randint(0, model.config.vocab_size, (context,), generator=gen).tolist()
    with torch.inference_mode():
        static.forward(inputs(row_block(prompt, Draft(), 0), 0, context), 0, 1, False)

    @torch.inference_mode()
    def timed(n: int) -> float:
        tokens = torch.randint(0, model.config.vocab_size, (n,), generator=gen).tolist()
        block = row_block(tokens[:1], bushy_tree(tokens[1:]), context) if tree else row_block(tokens, Draft(), context)
        size = bucket(n, BLOCK_SIZES)
        named = inputs(block, context, size)
        return fastest_seconds(lambda: static.forward(named, context, size, False), device, repeats)

    return timed


@torch.inference_mode()
def measure_copy_bandwidth(device: torch.device, nbytes: int = COPY_BYTES, repeats: int = 5) -> float:
    """GB/s of the fastest of `repeats` copies of an nbytes tensor into another on the device, counting the bytes
    read and the bytes written (STREAM's "copy" convention), with the threads the run decodes with."""
    source = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dest = torch.empty_like(source)
    seconds = fastest_seconds(lambda: dest.copy_(source), device, repeats)
    return 2 * nbytes / seconds / 1e9


def probe_seconds(model: PreTrainedModel, static: StaticTarget | None = None, repeats: int = 3) -> float:
    """A quick T(1): the fastest of `repeats` tree-masked one-token forwards after the measurement's context (what a
    run compares its stored T(1) with as it starts)."""
    return forward_timer(model, True, repeats, CONTEXT, static)(1)


def measure_cost_model(model: PreTrainedModel, target: str, rounds: int = 3, static: StaticTarget | None = None,
                       watch: CostWatch | None = None, plan: CostPlan | None = None) -> CostModel:
    """The run's verification curve, measured in interleaved rounds with the load read during them and checked
    before it may be kept (specbench.decode.cost_rounds; its Measurement says when, how, under what load and, where
    it failed its checks, why). static: the target's static runtime, where the run decodes on it. watch: how the
    load is read, the samples kept and progress shown (default: no load reading, nothing kept, no progress). plan:
    how (default CostPlan with `rounds`)."""
    watch = watch or CostWatch()
    plan = plan or CostPlan(rounds=rounds)
    samples = watch.resume(plan)
    timed = forward_timer(model, True, plan.repeats, CONTEXT, static)
    done = sum(x is not None for row in samples.seconds for x in row)
    with watch.progress(len(plan.sizes) * plan.rounds, done) as tick:
        curve, measured = measure_curve(CostRounds(plan, timed, watch, tick), samples)
    return CostModel(target, str(model.device), cpu_description(), curve, copy_gbps=measure_copy_bandwidth(model.device),
                     measured=measured)
