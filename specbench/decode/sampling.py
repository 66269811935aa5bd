"""Sampling settings and the one logits processing shared by vanilla sampling and every verifier."""
from __future__ import annotations

import torch

from specbench.decode.names import Sampling

__all__ = ["Sampling", "target_probs"]


def target_probs(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Distribution over the vocabulary after temperature, top-k and top-p: [..., V] -> [..., V] (fp32).

    Every sampled token in the harness (vanilla, bonus tokens, rejection residuals) comes from this function,
    so speculative methods and vanilla sample from exactly the same distribution."""
    if sampling.greedy:
        raise ValueError("target_probs is for T > 0; greedy decoding takes the argmax of the logits")
    scores = logits.float() / sampling.temperature
    if 0 < sampling.top_k < scores.shape[-1]:
        kth_best = torch.topk(scores, sampling.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth_best, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_scores, order = scores.sort(dim=-1, descending=True)
        sorted_probs = sorted_scores.softmax(dim=-1)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        # Keep the smallest prefix whose mass reaches top_p: drop a token once the mass before it already does.
        sorted_scores = sorted_scores.masked_fill(mass_before >= sampling.top_p, float("-inf"))
        scores = torch.full_like(scores, float("-inf")).scatter(-1, order, sorted_scores)
    return scores.softmax(dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token id drawn from a 1-D distribution."""
    return int(torch.multinomial(probs, 1, generator=generator).item())
