"""Medusa's heads, keyed as the published Medusa-1 checkpoints (FasterDecoding/Medusa, medusa_model.py): head k is a
residual SiLU block h + SiLU(W h + b) over the target's last hidden state ({k}.0.linear, W zero-initialised), then,
in the published layout, its OWN lm_head Linear(H, V) without bias ({k}.1). Without own lm_heads (the variant trained
here, `shared_lm_head`) every head's output goes through the target's frozen lm_head."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class ResidualBlock(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.linear.weight)  # starts as the identity: head k begins as the target's own guess

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + F.silu(self.linear(h))


class MedusaHeads(nn.Module):
    """K heads; `vocab` set: each with its own lm_head over that many tokens (the published layout)."""

    def __init__(self, hidden: int, n_heads: int, vocab: int | None = None) -> None:
        super().__init__()
        def head() -> nn.Sequential:
            return nn.Sequential(ResidualBlock(hidden), *([nn.Linear(hidden, vocab, bias=False)] if vocab else []))

        self.heads = nn.ModuleList([head() for _ in range(n_heads)])
        self.own_lm_heads = vocab is not None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """[..., H] -> [K, ..., H]: each head's residual block output (its lm_head's input)."""
        return torch.stack([head[0](h) for head in self.heads])

    def own_logits(self, features: torch.Tensor) -> torch.Tensor:
        """[K, ..., H] -> [K, ..., V]: each head's features through its own lm_head (the published layout)."""
        return torch.stack([head[1](f) for head, f in zip(self.heads, features)])
