"""Measuring what a forward costs on this machine: the target's tree-masked verification curve (the run's fixed
cost model, specbench.decode.cost_model) and the machine's description that goes with every timing."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedModel

from specbench.decode.cost_model import CostCurve, CostModel
from specbench.decode.draft import Draft
from specbench.decode.inputs import tree_inputs
from specbench.decode.kv import new_cache, truncate_cache
from specbench.decode.layout import AttentionLayout
from specbench.decode.runtime import fastest_seconds

SIZES = [1, 2, 4, 8, 12, 16, 24, 32]  # tokens per forward at which the curve is measured
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


@torch.inference_mode()
def measure_forward_curve(model: PreTrainedModel, sizes: list[int], tree: bool, repeats: int = 5,
                          context: int = CONTEXT) -> CostCurve:
    """Fastest of `repeats` forwards over n new tokens after a cached context, for each n (after one warm-up).
    tree=True: one pending token and n - 1 tree nodes under the engine's 4D tree mask (what verification runs);
    tree=False: n tokens under the model's own causal mask. The minimum is the least load-sensitive statistic."""
    device = model.device
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    cache = new_cache()
    layout = AttentionLayout.of(model.config)
    model(input_ids=torch.randint(0, vocab, (1, context), generator=gen).to(device), cache=cache,
          use_cache=True, logits_to_keep=1)
    seconds = []
    for n in sizes:
        tokens = torch.randint(0, vocab, (n,), generator=gen).tolist()
        draft = bushy_tree(tokens[1:]) if tree else Draft()
        inputs = tree_inputs(tokens[:1] if tree else tokens, draft, context, model.dtype, device, layout)

        def forward() -> None:
            model(input_ids=inputs.input_ids, position_ids=inputs.position_ids,
                  attention_mask=inputs.attention_mask, cache=cache, use_cache=True, logits_to_keep=n)
            truncate_cache(cache, context)

        seconds.append(fastest_seconds(forward, device, repeats))
    return CostCurve(list(sizes), seconds)


def measure_cost_model(model: PreTrainedModel, target: str, rounds: int = 3) -> CostModel:
    """The run's verification curve: per size the fastest over `rounds` passes over all sizes (a busy neighbour on
    a shared machine slows whole seconds at a time; one pass once read T(1) above T(2))."""
    curves = [measure_forward_curve(model, SIZES, tree=True) for _ in range(rounds)]
    fastest = [min(c.seconds[i] for c in curves) for i in range(len(SIZES))]
    return CostModel(target, str(model.device), cpu_description(), CostCurve(list(SIZES), fastest))
