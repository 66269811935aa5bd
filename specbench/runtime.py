"""The target runtime: how the target's forward runs, the same for every method (vanilla included), so that the
ratios stay honest.

On a CPU, speculation lives on forwards over a few tokens (1 to 32), and there PyTorch's `F.linear` (x @ Wᵀ) is
the slowest path: on a 2-core AVX2 EPYC it took 64 ms for the 30 layers' GEMMs of SmolLM2 at 2-4 tokens against
37 ms at one token, while the same products computed as W @ xᵀ took 22-24 ms. The runtime swaps every Linear
module of the target for one that computes W @ xᵀ up to `max_tokens` rows and falls back to `F.linear` above
(prefills). Its output is made contiguous, as F.linear's is: a transposed view sends attention to its slow kernel. The choice depends on the token count alone, never on a clock, so the same inputs always take the same
kernel and give the same floats. On a GPU the target is left as it is (cuBLAS has no such hole).

Swapping modules goes through the model's public module tree (`set_submodule`); the model's own forward, masks
and caches are untouched.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel

RUNTIMES = ("fast", "stock")

# Up to this many rows W @ xT beat F.linear on the 2-core AVX2 EPYC, weights streamed from memory as in a forward
# (30 layers' products: 2 rows 34 vs 64 ms, 4 rows 33 vs 65, 8 rows 43 vs 56, 16 rows 53 vs 68; 1 row a tie).
FEW_TOKENS = 32


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (around timed regions: a GPU runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fastest_seconds(run: Callable[[], object], device: torch.device, repeats: int = 5) -> float:
    """Fastest of `repeats` timed calls after one untimed warm-up (the least load-sensitive statistic)."""
    times = []
    for _ in range(repeats + 1):
        synchronize(device)
        t0 = time.perf_counter()
        run()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return min(times[1:])


class FewTokenLinear(nn.Module):
    """A Linear layer that computes W @ xᵀ for at most max_tokens rows (fast for few tokens on a CPU) and
    F.linear above. Shares the original module's parameters (tied embeddings stay tied)."""

    def __init__(self, linear: nn.Linear, max_tokens: int) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.max_tokens = max_tokens

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if rows > self.max_tokens or rows == 0:
            return F.linear(x, self.weight, self.bias)
        flat = x.reshape(rows, x.shape[-1])
        if self.bias is None:
            out = torch.mm(self.weight, flat.T).T
        else:
            out = torch.addmm(self.bias.unsqueeze(1), self.weight, flat.T).T
        # Contiguous like F.linear's output: a transposed view would push attention onto its slow (math) kernel.
        return out.contiguous().reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, W @ xT up to {self.max_tokens} rows"


@dataclass(frozen=True)
class RuntimeInfo:
    name: str  # "fast" or "stock"
    swapped_linears: int
    max_tokens: int


def swap_linears(model: PreTrainedModel, max_tokens: int = FEW_TOKENS) -> list[tuple[str, nn.Module]]:
    """Replace every nn.Linear of the model by a FewTokenLinear; returns the originals (for `restore`)."""
    originals = [(name, module) for name, module in model.named_modules() if type(module) is nn.Linear]
    for name, module in originals:
        model.set_submodule(name, FewTokenLinear(module, max_tokens))
    return originals


def stock_linears(model: PreTrainedModel) -> list[tuple[str, nn.Module]]:
    """Undo swap_linears: transformers' own Linear modules on the same parameters; returns what to put back."""
    swapped = [(name, m) for name, m in model.named_modules() if isinstance(m, FewTokenLinear)]
    for name, m in swapped:
        linear = nn.Linear(m.in_features, m.out_features, bias=m.bias is not None, device="meta")
        linear.weight, linear.bias = m.weight, m.bias
        model.set_submodule(name, linear)
    return swapped


def restore(model: PreTrainedModel, originals: list[tuple[str, nn.Module]]) -> None:
    for name, module in originals:
        model.set_submodule(name, module)


def prepare(model: PreTrainedModel, runtime: str = "fast", max_tokens: int = FEW_TOKENS) -> RuntimeInfo:
    """Set up the target's runtime in place. "stock" leaves the model as transformers built it."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; valid: {', '.join(RUNTIMES)}")
    if runtime == "stock" or model.device.type != "cpu":
        return RuntimeInfo("stock" if runtime == "stock" else "fast (GPU: stock kernels)", 0, 0)
    return RuntimeInfo(runtime, len(swap_linears(model, max_tokens)), max_tokens)
