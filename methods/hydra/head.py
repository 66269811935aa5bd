"""Hydra's draft heads: head k reads the target's last hidden state AND the embeddings of the k + 1 tokens after it
(the token just emitted, then the tokens drafted before it), so its guess depends on the candidate's prefix.

Each head is an MLP of residual SiLU blocks, keyed as the official checkpoints' `hydra_mlp.{k}.{j}`: the first block
maps the concatenation [h, e_1 .. e_{k+1}] ((k + 2) H wide) to H with a learned residual projection
(`res_connection`) plus SiLU(W x) (W zero-initialised); the next ones are Medusa's h + SiLU(W h). The official code
repeats one module object for the extra blocks (they share weights); ours are distinct. The heads end in the
target's frozen lm_head, shared, as Medusa's do here (methods/medusa explains why on a CPU).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class HydraBlock(nn.Module):
    """x -> res(x) + SiLU(W x); res is the identity when x is already H wide, else a learned projection."""

    def __init__(self, hidden: int, inputs: int = 1) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden * inputs, hidden)
        nn.init.zeros_(self.linear.weight)
        self.res_connection = nn.Linear(hidden * inputs, hidden) if inputs > 1 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res_connection(x) + F.silu(self.linear(x))


class HydraHeads(nn.Module):
    """hydra_mlp[k]: [..., (k + 2) H] -> [..., H], the lm_head input that guesses the token k + 2 places ahead of
    the hidden state's position."""

    def __init__(self, hidden: int, n_heads: int, n_layers: int = 1) -> None:
        super().__init__()
        self.hidden, self.n_layers = hidden, n_layers
        self.hydra_mlp = nn.ModuleList([
            nn.Sequential(HydraBlock(hidden, k + 2), *[HydraBlock(hidden) for _ in range(n_layers - 1)])
            for k in range(n_heads)
        ])

    def __len__(self) -> int:
        return len(self.hydra_mlp)

    def forward(self, k: int, x: torch.Tensor) -> torch.Tensor:
        return self.hydra_mlp[k](x)
