"""The target's cost of verifying n tokens at once, measured on this machine: what tree sizes are worth it.

On a GPU, verifying 60 tokens costs about as much as one; on a 2-core CPU 16 tokens cost about twice one. Methods
that size their trees from this curve adapt to the machine instead of carrying GPU defaults.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel

from specbench.kv import truncate_cache


@dataclass(frozen=True)
class CostCurve:
    sizes: list[int]  # tokens verified in one forward, ascending, starting at 1
    seconds: list[float]  # median time of one forward with that many new tokens

    def at(self, n: int) -> float:
        """Seconds for a forward of n new tokens, linearly interpolated (extrapolated past the last size)."""
        sizes, secs = self.sizes, self.seconds
        if n <= sizes[0]:
            return secs[0]
        for (a, ta), (b, tb) in zip(zip(sizes, secs), zip(sizes[1:], secs[1:])):
            if n <= b:
                return ta + (tb - ta) * (n - a) / (b - a)
        a, b = sizes[-2], sizes[-1]
        return secs[-1] + (secs[-1] - secs[-2]) * (n - b) / (b - a)


@torch.inference_mode()
def measure_verify_cost(model: PreTrainedModel, sizes: list[int], context: int = 256, repeats: int = 3) -> CostCurve:
    """Median wall time of a forward over n new tokens after a cached context, for each n in sizes."""
    device = model.device
    vocab = model.config.vocab_size
    context_ids = torch.randint(0, vocab, (1, context), generator=torch.Generator().manual_seed(0)).to(device)
    cache = DynamicCache(config=model.config)
    model(input_ids=context_ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    seconds = []
    for n in sizes:
        times = []
        for _ in range(repeats + 1):  # the first run warms up
            new = torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(n)).to(device)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(input_ids=new, past_key_values=cache, use_cache=True, logits_to_keep=n)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            truncate_cache(cache, context)
        seconds.append(sorted(times[1:])[len(times[1:]) // 2])
    return CostCurve(list(sizes), seconds)
