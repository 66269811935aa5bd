"""The bytes a target forward must read, for the report's roofline: every weight once (parameter count x element
size, as gpt-fast counts it), plus each layer's keys and values at the forward's context length (a sliding layer's
at most its window). Recorded in run.json's environment when a run starts (TargetBytes.to_dict), computed from the
records' context lengths at report time (forward_bytes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from specbench.decode.layout import SLIDING


@dataclass(frozen=True)
class KvGroup:
    layers: int
    bytes_per_token: int  # keys and values of one token in one layer of the group
    window: int | None = None  # a sliding window: the layer reads at most this many tokens

    def bytes_at(self, context: int) -> int:
        tokens = context if self.window is None else min(context, self.window)
        return self.layers * self.bytes_per_token * tokens


@dataclass(frozen=True)
class TargetBytes:
    weights: int
    kv: tuple[KvGroup, ...]

    def forward_bytes(self, contexts: list[int]) -> int:
        """One forward over a batch whose rows attend to these cached context lengths: the weights once, every
        row's keys and values."""
        return self.weights + sum(g.bytes_at(c) for c in contexts for g in self.kv)

    def to_dict(self) -> dict[str, Any]:
        return {"weights": self.weights, "kv": [{"layers": g.layers, "bytes_per_token": g.bytes_per_token,
                                                 "window": g.window} for g in self.kv]}

    @staticmethod
    def from_dict(raw: Any) -> "TargetBytes | None":
        """None where a run did not record them (before the roofline existed) or they are malformed."""
        try:
            return TargetBytes(int(raw["weights"]), tuple(
                KvGroup(int(g["layers"]), int(g["bytes_per_token"]), None if g.get("window") is None else
                        int(g["window"])) for g in raw["kv"]))
        except (KeyError, TypeError, ValueError):
            return None


def kv_bytes_per_token(config: Any, element_size: int) -> int:
    """One layer's keys and values of one token: 2 x kv_heads x head_dim x element size (MLA targets: every query
    head's expanded keys and values, as transformers caches them)."""
    heads = config.num_attention_heads
    if getattr(config, "kv_lora_rank", None):
        key_dim = config.qk_nope_head_dim + config.qk_rope_head_dim
        return heads * (key_dim + config.v_head_dim) * element_size
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * kv_heads * head_dim * element_size


def target_bytes(model: torch.nn.Module) -> TargetBytes:
    """The target's weight bytes and its layers' KV bytes per token, in the dtype it runs in."""
    config = model.config
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    per_token = kv_bytes_per_token(config, torch.empty((), dtype=model.dtype).element_size())
    layers = config.num_hidden_layers
    kinds = list(getattr(config, "layer_types", None) or [])[:layers]
    window = getattr(config, "sliding_window", None)
    sliding = kinds.count(SLIDING) if kinds else (layers if window else 0)
    groups = [KvGroup(layers - sliding, per_token)] if sliding < layers else []
    if sliding:
        groups.append(KvGroup(sliding, per_token, int(window)))
    return TargetBytes(weights, tuple(groups))
