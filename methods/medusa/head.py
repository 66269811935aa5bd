"""Medusa's heads: K residual SiLU blocks h + SiLU(W h + b) over the target's last hidden state (W zero-initialised),
keyed as the official checkpoints' residual blocks."""
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
    """Keys as the official Medusa checkpoints' residual blocks: {k}.0.linear.weight / .bias."""

    def __init__(self, hidden: int, n_heads: int) -> None:
        super().__init__()
        self.heads = nn.ModuleList([nn.Sequential(ResidualBlock(hidden)) for _ in range(n_heads)])

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """[..., H] -> [K, ..., H]: each head's predicted lm_head input."""
        return torch.stack([head(h) for head in self.heads])
