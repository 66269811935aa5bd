"""What attention a target's layers use, and the masks the engine hands them.

The engine keeps ONE full-length cache for every layer (specbench.decode.kv.SlotCache: every layer's slots in one
tensor, so compaction and row gathering work alike everywhere) and enforces a sliding window in the mask: a sliding layer's
query at position q sees a key at position k only if q - k < window (transformers' own rule), counted in positions,
not cache slots. Models that name their layers' kinds (config.layer_types: Gemma 2/3, gpt-oss, Cohere 2, OLMo 3...)
take one mask per kind; models with one window for every layer (Mistral, Phi-3, Mixtral with sliding_window set)
take one windowed mask. Recurrent and linear-attention layers (Mamba-style, gated delta) keep a state that a
rejected draft would corrupt: such targets are refused before anything is decoded.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from specbench.errors import SpecbenchError

FULL, SLIDING = "full_attention", "sliding_attention"
# Families whose layers keep a recurrent state (some name no layer types that would tell).
RECURRENT_FAMILIES = {"mamba", "mamba2", "falcon_mamba", "falcon_h1", "jamba", "bamba", "zamba", "zamba2", "lfm2",
                      "lfm2_moe", "qwen3_next", "granitemoehybrid", "nemotron_h", "minimax", "recurrent_gemma", "rwkv",
                      "xlstm"}


@dataclass(frozen=True)
class AttentionLayout:
    """The sliding window of each layer kind that has one; per_kind: the model takes a mask per layer kind."""
    windows: dict[str, int] = field(default_factory=dict)
    per_kind: bool = False

    @staticmethod
    def of(config: Any) -> "AttentionLayout":
        family = getattr(config, "model_type", "?")
        kinds = set(getattr(config, "layer_types", None) or [])
        unsupported = kinds - {FULL, SLIDING}
        if family in RECURRENT_FAMILIES or unsupported:
            what = f" ({', '.join(sorted(unsupported))} layers)" if unsupported else ""
            raise SpecbenchError(
                f"target family {family}{what} keeps a recurrent or chunked attention state that verifying a draft "
                "would have to save and restore; specbench supports full, sliding-window and MLA attention")
        window = getattr(config, "sliding_window", None)
        if SLIDING in kinds:
            if not window:
                raise SpecbenchError(f"target family {family} has sliding_attention layers but no sliding_window")
            return AttentionLayout({SLIDING: int(window)}, per_kind=True)
        if not kinds and window:  # one window for all layers (Mistral-style)
            return AttentionLayout({"all": int(window)})
        return AttentionLayout()

    def masks(self, allowed: torch.Tensor, query_positions: torch.Tensor, key_positions: torch.Tensor | None,
              dtype: torch.dtype) -> torch.Tensor | dict[str, torch.Tensor]:
        """Additive [B, 1, N, K] masks from allowed [B, N, K] (what each query may see), positions [B, N] and
        [B, K] (needed only with a window): one tensor, or one per layer kind."""
        def windowed(window: int) -> torch.Tensor:
            near = query_positions[:, :, None] - key_positions[:, None, :] < window
            return additive(allowed & near, dtype)

        if not self.windows:
            return additive(allowed, dtype)
        if not self.per_kind:
            return windowed(self.windows["all"])
        return {FULL: additive(allowed, dtype), SLIDING: windowed(self.windows[SLIDING])}


FULL_ONLY = AttentionLayout()  # every layer attends to the whole context


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, N, K] bool (what each query may see) -> the additive mask [B, 1, N, K]: 0 where allowed, dtype's lowest
    elsewhere (the one definition for the target's, a draft model's and a feature head's masks)."""
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    lowest = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, lowest)[:, None]
