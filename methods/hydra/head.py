"""Hydra's draft heads (zankner/Hydra, hydra/model/hydra_heads/): head k reads a context vector c and the
embeddings of the k + 1 tokens after it (the token just emitted, then the tokens drafted before it), so its guess
depends on the candidate's prefix.

Each head is an MLP of residual SiLU blocks, `hydra_mlp.{k}`: the first maps [c, e_1 .. e_{k+1}] ((k + 2) H wide) to
H with a learned residual projection (`res_connection`) plus SiLU(W x + b) (W zero-initialised); the other
`hydra_num_layers - 1` are ONE block h + SiLU(W h + b) applied again and again (the reference repeats one module
object, so they share weights; its checkpoint holds a copy per repeat, the last of which it loads).
- `mlp` heads: c is the target's last hidden state (after its final norm).
- `prefix-mlp` (Hydra++): c is the output of the prefix layer, a one-layer Llama (`prefix`, the reference's
  `prefix_embeding_layer`, with its own final norm and a KV cache of its own) run causally over the target's
  hidden states of the whole sequence.
A head ends in its own lm_head Linear(H, V) with bias (`hydra_lm_head.{k}`), as published, or, in the variant
trained here (`shared_lm_head`), in the target's frozen lm_head (methods/medusa explains why on a CPU).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from transformers import LlamaConfig, LlamaModel

ARCHS = ("mlp", "prefix-mlp")


class HydraBlock(nn.Module):
    """x -> res(x) + SiLU(W x); res is the identity when x is already H wide, else a learned projection."""

    def __init__(self, hidden: int, inputs: int = 1) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden * inputs, hidden)
        nn.init.zeros_(self.linear.weight)
        self.res_connection = nn.Linear(hidden * inputs, hidden) if inputs > 1 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res_connection(x) + F.silu(self.linear(x))


def prefix_config(target: LlamaConfig) -> LlamaConfig:
    """The prefix layer's: one decoder layer of the target's shape; RoPE base 10000 whatever the target's (the
    reference's rotary embedding hard-codes it)."""
    return LlamaConfig(vocab_size=target.vocab_size, hidden_size=target.hidden_size,
                       intermediate_size=target.intermediate_size, num_hidden_layers=1,
                       num_attention_heads=target.num_attention_heads, num_key_value_heads=target.num_key_value_heads,
                       head_dim=getattr(target, "head_dim", None) or target.hidden_size // target.num_attention_heads,
                       rms_norm_eps=target.rms_norm_eps, max_position_embeddings=target.max_position_embeddings,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, attention_bias=False,
                       tie_word_embeddings=False)


class HydraHeads(nn.Module):
    """hydra_mlp[k]: [..., (k + 2) H] -> [..., H], the lm_head input that guesses the token k + 2 places ahead of
    the context vector's position; `vocab` set: each head's own lm_head over that many tokens; `prefix` set:
    Hydra++'s prefix layer (a LlamaConfig of prefix_config's shape)."""

    def __init__(self, hidden: int, n_heads: int, n_layers: int = 1, vocab: int | None = None,
                 prefix: LlamaConfig | None = None) -> None:
        super().__init__()
        self.hidden, self.n_layers = hidden, n_layers

        def head(k: int) -> nn.Sequential:
            first = HydraBlock(hidden, k + 2)
            return nn.Sequential(first, *[HydraBlock(hidden)] * (n_layers - 1)) if n_layers > 1 else nn.Sequential(first)

        self.hydra_mlp = nn.ModuleList([head(k) for k in range(n_heads)])
        self.hydra_lm_head = nn.ModuleList([nn.Linear(hidden, vocab) for _ in range(n_heads)]) if vocab else None
        self.prefix = LlamaModel(prefix) if prefix is not None else None

    @property
    def arch(self) -> str:
        return "mlp" if self.prefix is None else "prefix-mlp"

    def __len__(self) -> int:
        return len(self.hydra_mlp)

    def forward(self, k: int, x: torch.Tensor) -> torch.Tensor:
        return self.hydra_mlp[k](x)
