"""`specbench bench`: our loop against HF transformers' `generate` on the same prompts, interleaved per prompt.

Our vanilla vs HF greedy shows the baseline is not handicapped (goal >= 0.95x); our pld vs HF
prompt_lookup_num_tokens=10 compares the same method in both. Throughput = total new tokens / total time.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch
from tqdm import tqdm

from specbench.methods.pld import PromptLookupDrafter
from specbench.methods.vanilla import VanillaDrafter
from specbench.engine import generate
from specbench.sampling import Sampling
from specbench.target import LoadedModel


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
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=max_new_tokens, pad_token_id=pad, **extra)
        return out[0, len(prompt):].tolist()

    def ours(prompt: list[int], drafter) -> list[int]:
        return generate(model, prompt, drafter, Sampling(), max_new_tokens, stops).token_ids

    systems: dict[str, Callable[[list[int]], list[int]]] = {
        "hf_greedy": lambda p: hf(p),
        "ours_vanilla": lambda p: ours(p, VanillaDrafter()),
        "hf_pld10": lambda p: hf(p, prompt_lookup_num_tokens=10),
        "ours_pld": lambda p: ours(p, PromptLookupDrafter()),
    }
    for run in systems.values():  # warm-up: first calls pay for allocations and lazy initialisation
        run(prompts[0][:32])
    tallies = {name: Tally() for name in systems}
    for prompt in tqdm(prompts, desc="bench", unit="prompt", disable=not progress):
        for name, run in systems.items():
            _timed(tallies[name], lambda: run(prompt))
    lines = [f"{'system':<14}{'tokens':>8}{'seconds':>10}{'tok/s':>9}"]
    for name, t in tallies.items():
        lines.append(f"{name:<14}{t.tokens:>8}{t.seconds:>10.2f}{t.rate:>9.1f}")
    same = sum(a == b for a, b in zip(tallies["hf_greedy"].outputs, tallies["ours_vanilla"].outputs))
    lines.append(f"ours_vanilla / hf_greedy = {tallies['ours_vanilla'].rate / tallies['hf_greedy'].rate:.3f}x"
                 f"  (identical outputs: {same}/{len(prompts)})")
    lines.append(f"ours_pld / hf_pld10      = {tallies['ours_pld'].rate / tallies['hf_pld10'].rate:.3f}x")
    lines.append(f"ours_pld / ours_vanilla  = {tallies['ours_pld'].rate / tallies['ours_vanilla'].rate:.3f}x")
    lines.append(f"hf_pld10 / hf_greedy     = {tallies['hf_pld10'].rate / tallies['hf_greedy'].rate:.3f}x")
    return "\n".join(lines)
