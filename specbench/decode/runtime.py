"""The target runtime: how the target's forward runs, the same for every method (vanilla included), so that the
ratios stay honest.

On a CPU, speculation lives on forwards over a few tokens (1 to 32), where the fastest product kernel depends on
the token count and the machine (reports/cost/linear_kernels.txt, reports/cpu-kernels-intel). So the runtime swaps
the target's Linear modules (through `set_submodule`; forward, masks and caches untouched) for `FewTokenLinear`s,
whose `KernelRule` names a kernel per row count: "pair" (the first column of W @ [x; x]ᵀ), "wxt" (W @ xᵀ), "packed"
(oneDNN-prepacked weights, as inductor's CPU freezing; copied once, the target is frozen) or "linear" (F.linear);
prefills take F.linear. specbench.run.kernel_rule measures the rule once per machine before any decoding and stores
it (loaded here alone: FIXED_RULE). The row count alone picks the kernel, never a clock: equal inputs, equal floats.
Outputs are contiguous like F.linear's (a transposed view sends attention to its slow kernel). Not on a GPU.

The runtime is two orthogonal choices (`--kernels`, `--graphs`; specbench.decode.names.Runtime):
- kernels: "few-token" (the kernels above; the CPU's default), "stock" (transformers' modules as they are; the GPU's
  default) or "inductor" (the target's forward compiled by torch.compile, inductor's default mode: its fused kernels,
  as hf-compiled's, run under our graphs; the runner compiles it, specbench.decode.runner; drafters stay stock);
- graphs: "on" (every forward at a bucketed shape over a cache reserved for the run, replayed from CUDA graphs on
  CUDA: the GPU's default; on a CPU the same shapes, uncaptured, which is how the CPU tests run the GPU's path) or
  "off" (each forward at its own shape; the CPU's default). specbench.decode.runner runs both on one slot cache.
`--kernels stock --graphs off` is the EAGLE and Spec-Bench repositories' GPU protocol (transformers' modules at their
own shapes), for comparison with published numbers (`--runtime eager` names it).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel

from specbench.decode.names import FIXED_RULE, KernelRule, Runtime
from specbench.errors import SpecbenchError

FEW_TOKENS = 32  # above this many rows (prefills) F.linear is as fast as anything else
PACK_ROWS_HINT = 16  # the row count oneDNN lays the packed weights out for (8, 16 or 32 measured alike)


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


def pack_weight(weight: torch.Tensor) -> torch.Tensor | None:
    """oneDNN's blocked copy of an fp32 CPU weight, or None where oneDNN or its linear op is missing."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS_HINT)
    except (AttributeError, RuntimeError):
        return None


class FewTokenLinear(nn.Module):
    """A Linear layer taking its rule's kernel for each row count, on the original's parameters (tied stay tied)."""

    def __init__(self, linear: nn.Linear, max_tokens: int, rule: KernelRule = FIXED_RULE) -> None:
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.max_tokens, self.rule = max_tokens, rule
        # A plain attribute, not a buffer: it is a cache of the weight, never saved or moved.
        self.packed = pack_weight(linear.weight) if "packed" in rule.kernels else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        kernel = self.rule.pick(rows, self.max_tokens, self.packed is not None and not torch.is_grad_enabled())
        if kernel == "linear":
            return F.linear(x, self.weight, self.bias)
        return self.product(x.reshape(rows, x.shape[-1]), kernel).reshape(*x.shape[:-1], self.out_features)

    def product(self, flat: torch.Tensor, kernel: str) -> torch.Tensor:
        """flat [rows, in] -> [rows, out] (contiguous) through the named kernel."""
        if kernel == "linear":
            return F.linear(flat, self.weight, self.bias)
        if kernel == "packed":
            if self.packed is None:
                raise ValueError("no packed weights on this module (oneDNN missing, or not fp32 on a CPU)")
            return torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, "none", [], "")
        rows = flat.shape[0]
        cols = (torch.cat([flat, flat]) if kernel == "pair" else flat).T
        out = torch.mm(self.weight, cols) if self.bias is None else torch.addmm(self.bias[:, None], self.weight, cols)
        # Contiguous like F.linear's output: a transposed view would push attention onto its slow (math) kernel.
        return out[:, :rows].T.contiguous()

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, {self.rule}"


@dataclass(frozen=True)
class RuntimeInfo:
    name: str  # the kernels, with "+graphs" where forwards run at fixed shapes (prepare), e.g. "few-token"
    swapped_linears: int
    packed_linears: int = 0  # of the swapped ones, with oneDNN-packed weights
    fixed_shapes: bool = False  # bucketed shapes over a cache reserved for the run (specbench.decode.runner)
    captured: bool = False  # ... replayed from CUDA graphs
    compiled: bool = False  # the target's forward compiled by torch.compile (kernels "inductor")
    rule: KernelRule = FIXED_RULE  # the few-token kernels' (specbench.run.kernel_rule; drafters take the target's)
    rule_source: str = "FIXED_RULE"  # where the rule came from (a stored measurement of this machine's)


def swap_linears(model: nn.Module, max_tokens: int = FEW_TOKENS,
                 rule: KernelRule = FIXED_RULE) -> list[tuple[str, nn.Module]]:
    """Replace every nn.Linear of the model by a FewTokenLinear; returns the originals (for `restore`)."""
    originals = [(name, module) for name, module in model.named_modules() if type(module) is nn.Linear]
    for name, module in originals:
        model.set_submodule(name, FewTokenLinear(module, max_tokens, rule))
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


def drafter_kernels(runtime: RuntimeInfo | None, device: torch.device) -> bool:
    """Whether a drafter's own products take the runtime's kernels: where the target's do (few-token kernels, CPU)."""
    return runtime is not None and runtime.swapped_linears > 0 and device.type == "cpu"


def prepare_drafter(module: nn.Module, runtime: RuntimeInfo | None) -> None:
    """A drafter's modules run on the target's kernels too (a draft step is a forward over a few rows)."""
    params = list(module.parameters())
    if params and drafter_kernels(runtime, params[0].device):
        swap_linears(module, rule=runtime.rule)


def frozen_linear(weight: torch.Tensor, runtime: RuntimeInfo | None) -> nn.Module:
    """A bias-free Linear layer over a frozen weight [out, in] (the target's lm_head rows), on the target's kernels."""
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    linear.weight = nn.Parameter(weight, requires_grad=False)
    return FewTokenLinear(linear, FEW_TOKENS, runtime.rule) if drafter_kernels(runtime, weight.device) else linear


def resolved(runtime: Runtime | str, device: torch.device) -> tuple[str, bool]:
    """What "auto" stands for on a device: (kernels, graphs on). Few-token kernels on a CPU, stock ones elsewhere;
    graphs on on CUDA."""
    choice = Runtime.of(runtime)
    cpu = device.type == "cpu"
    kernels = choice.kernels if choice.kernels != "auto" else ("few-token" if cpu else "stock")
    if kernels == "few-token" and not cpu:
        raise SpecbenchError(f"--kernels few-token: the few-token kernels are the CPU's (the device is {device.type}; "
                             "cuBLAS has no few-row hole): use --kernels stock or auto")
    return kernels, choice.graphs == "on" or (choice.graphs == "auto" and device.type == "cuda")


def prepare(model: PreTrainedModel, runtime: Runtime | str = "auto", max_tokens: int = FEW_TOKENS) -> RuntimeInfo:
    """Set up the target's runtime in place. Stock and inductor kernels leave the model as transformers built it (the
    target's runner compiles a wrapper of it: transformers' own generate, hf-compiled, still sees the model)."""
    kernels, graphs = resolved(runtime, model.device)
    name = kernels + ("+graphs" if graphs else "")
    if kernels in ("stock", "inductor"):
        return RuntimeInfo(name, 0, fixed_shapes=graphs, captured=graphs and model.device.type == "cuda",
                           compiled=kernels == "inductor")
    swap_linears(model, max_tokens)
    swapped = [m for m in model.modules() if isinstance(m, FewTokenLinear)]
    return RuntimeInfo(name, len(swapped), sum(m.packed is not None for m in swapped), fixed_shapes=graphs)
