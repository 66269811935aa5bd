"""`specbench bench`: our loop and runtime against HF transformers' `generate` on the same prompts, interleaved
per prompt; `bench --cost`: the target's forward cost T(k) over k new tokens, stock against the engine's runtime.

HF generate always runs the stock model (transformers' own modules); ours runs the engine's runtime, as `run` does.
Our pld vs HF prompt_lookup_num_tokens=10 compares the same method in both. Throughput = total new tokens / total
time, after one untimed warm-up per system.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch
from tqdm import tqdm

from specbench.decode.cost_model import SIZES, CostCurve, CostModel
from specbench.decode.costs import cpu_description, measure_forward_curve
from specbench.decode.engine import generate
from specbench.decode.runtime import FewTokenLinear, fastest_seconds, restore, stock_linears
from specbench.decode.sampling import Sampling
from specbench.decode.target import LoadedModel
from specbench.method import BuildContext
from specbench.run.registry import select_methods


@dataclass
class Tally:
    tokens: int = 0
    seconds: float = 0.0
    outputs: list[list[int]] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def _timed(tally: Tally, run: Callable[[], list[int]]) -> None:
    start = time.perf_counter()
    tokens = run()
    tally.seconds += time.perf_counter() - start
    tally.tokens += len(tokens)
    tally.outputs.append(tokens)


def benchmark(target: LoadedModel, prompts: list[list[int]], max_new_tokens: int, progress: bool = True) -> str:
    model, stops = target.model, target.stop_ids
    pad = next(iter(stops)) if stops else 0

    def hf(prompt: list[int], **extra) -> list[int]:
        ids = torch.tensor([prompt], device=model.device)
        runtime = stock_linears(model)
        try:
            with torch.inference_mode():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     max_new_tokens=max_new_tokens, pad_token_id=pad, **extra)
        finally:
            restore(model, runtime)
        return out[0, len(prompt):].tolist()

    def ours(prompt: list[int], drafter) -> list[int]:
        return generate(model, prompt, drafter, Sampling(), max_new_tokens, stops).token_ids

    vanilla, pld = (m.drafter(BuildContext(target)) for m in select_methods(["vanilla", "pld"]))  # pld's defaults
    systems: dict[str, Callable[[list[int]], list[int]]] = {
        "hf_greedy": lambda p: hf(p),
        "ours_vanilla": lambda p: ours(p, vanilla),
        "hf_pld10": lambda p: hf(p, prompt_lookup_num_tokens=10),
        "ours_pld": lambda p: ours(p, pld),
    }
    for run in systems.values():  # warm-up: first calls pay for allocations and lazy initialisation
        run(prompts[0][:32])
    tallies = {name: Tally() for name in systems}
    for prompt in tqdm(prompts, desc="bench", unit="prompt", disable=not progress):
        for name, run in systems.items():
            _timed(tallies[name], lambda: run(prompt))
    lines = [f"runtime: {target.runtime.name if target.runtime else 'stock'}; {cpu_description()}; "
             f"{torch.get_num_threads()} threads; device {model.device}",
             f"{'system':<14}{'tokens':>8}{'seconds':>10}{'tok/s':>9}"]
    for name, t in tallies.items():
        lines.append(f"{name:<14}{t.tokens:>8}{t.seconds:>10.2f}{t.rate:>9.1f}")
    same = sum(a == b for a, b in zip(tallies["hf_greedy"].outputs, tallies["ours_vanilla"].outputs))
    lines.append(f"ours_vanilla / hf_greedy = {tallies['ours_vanilla'].rate / tallies['hf_greedy'].rate:.3f}x"
                 f"  (identical outputs: {same}/{len(prompts)})")
    lines.append(f"ours_pld / hf_pld10      = {tallies['ours_pld'].rate / tallies['hf_pld10'].rate:.3f}x")
    lines.append(f"ours_pld / ours_vanilla  = {tallies['ours_pld'].rate / tallies['ours_vanilla'].rate:.3f}x")
    lines.append(f"hf_pld10 / hf_greedy     = {tallies['hf_pld10'].rate / tallies['hf_greedy'].rate:.3f}x")
    return "\n".join(lines)


@torch.inference_mode()
def stream_seconds(model, repeats: int = 5) -> float:
    """Reading every parameter once (a sum over each): the memory-bandwidth floor of a one-token forward."""
    params = list(model.parameters())
    return fastest_seconds(lambda: [p.sum() for p in params], model.device, repeats)


@torch.inference_mode()
def gemm_seconds(model, k: int, repeats: int = 5) -> float:
    """The decoder layers' Linear products alone for k rows, through the modules the model runs with."""
    linears = [m for name, m in model.named_modules()
               if isinstance(m, (torch.nn.Linear, FewTokenLinear)) and ".layers." in f".{name}"]
    inputs = [torch.randn(1, k, m.in_features, device=model.device, dtype=model.dtype) for m in linears]
    return fastest_seconds(lambda: [m(x) for m, x in zip(linears, inputs)], model.device, repeats)


def cost_benchmark(target: LoadedModel, sizes: list[int] = SIZES, repeats: int = 9, rounds: int = 3) -> dict:
    """T(k) for the stock HF forward and for the engine's runtime (causal and under a tree mask), in one run,
    with the machine's floors. Within a round every size is measured for the three in turn, so that drift hits
    them alike; a cell is the fastest of `repeats` forwards after a warm-up, and of `rounds` rounds (a busy
    neighbour on a shared machine slows whole seconds at a time)."""
    model = target.model
    cells: dict[str, list[float]] = {name: [float("inf")] * len(sizes) for name in
                                     ("hf", "engine", "tree", "hf_gemm", "engine_gemm")}

    def keep(name: str, i: int, seconds: float) -> None:
        cells[name][i] = min(cells[name][i], seconds)

    for _ in tqdm(range(rounds), desc="cost rounds", unit="round"):
        for i, n in enumerate(sizes):
            runtime = stock_linears(model)
            keep("hf", i, measure_forward_curve(model, [n], tree=False, repeats=repeats).seconds[0])
            keep("hf_gemm", i, gemm_seconds(model, n, repeats))
            restore(model, runtime)
            keep("engine", i, measure_forward_curve(model, [n], tree=False, repeats=repeats).seconds[0])
            keep("tree", i, measure_forward_curve(model, [n], tree=True, repeats=repeats).seconds[0])
            keep("engine_gemm", i, gemm_seconds(model, n, repeats))
    floor = min(stream_seconds(model, repeats) for _ in range(rounds))
    costs = CostModel(target.name, str(model.device), cpu_description(), CostCurve(list(sizes), cells["tree"]))
    ms = lambda seconds: [round(s * 1000, 2) for s in seconds]  # noqa: E731
    return {
        "k": list(sizes), "hf_ms": ms(cells["hf"]), "engine_ms": ms(cells["engine"]),
        "engine_tree_ms": ms(cells["tree"]), "floor_stream_ms": round(floor * 1000, 2),
        "hf_gemm_ms": ms(cells["hf_gemm"]), "engine_gemm_ms": ms(cells["engine_gemm"]),
        "runtime": target.runtime.name if target.runtime else "stock", "cpu": cpu_description(),
        "device": str(model.device), "dtype": str(model.dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(), "target": target.name, "repeats": repeats, "rounds": rounds,
        "costs": costs.to_dict(),
    }


def format_costs(result: dict) -> str:
    k, hf, eng, tree = result["k"], result["hf_ms"], result["engine_ms"], result["engine_tree_ms"]
    lines = [f"target {result['target']}, {result['device']} {result['dtype']}, {result['threads']} threads, "
             f"{result['cpu']}; runtime {result['runtime']}; fastest of {result['repeats']} after a warm-up in each of "
             f"{result.get('rounds', 1)} rounds, "
             "256 cached tokens; HF = transformers' own modules, engine = the runtime, tree = under a tree mask",
             *([f"kernel rule: {result['kernel_rule']} ({result['kernel_rule_source']})"] if "kernel_rule" in result
               else []),
             f"{'k':>4}{'HF ms':>9}{'engine ms':>11}{'tree ms':>9}{'HF GEMMs':>10}{'our GEMMs':>11}"]
    for i, n in enumerate(k):
        lines.append(f"{n:>4}{hf[i]:>9.1f}{eng[i]:>11.1f}{tree[i]:>9.1f}{result['hf_gemm_ms'][i]:>10.1f}"
                     f"{result['engine_gemm_ms'][i]:>11.1f}")
    lines.append(f"floor: all weights streamed once {result['floor_stream_ms']:.1f} ms")
    at = {n: i for i, n in enumerate(k)}
    for name, curve in (("HF", hf), ("engine (tree mask)", tree)):
        if 4 in at and 16 in at:
            lines.append(f"{name}: T(4)/T(1) = {curve[at[4]] / curve[0]:.2f}, T(16)/T(1) = {curve[at[16]] / curve[0]:.2f}")
    lines.append(f"engine T(1) / HF T(1) = {eng[0] / hf[0]:.2f}")
    return "\n".join(lines)
