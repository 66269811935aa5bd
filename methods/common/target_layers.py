"""Which of the target's hidden states a drafter conditioned on several layers reads (EAGLE-3's fused features,
DFlash's context features)."""
from __future__ import annotations


def fused_layers(num_hidden_layers: int) -> tuple[int, int, int]:
    """A low, a middle and a high layer: the inputs of decoder layers 2, L//2 and L-3 (EAGLE-3's choice), as indices
    into transformers' output_hidden_states; clamped to [0, L] for the tiny targets of tests (fewer than five
    layers)."""
    n = num_hidden_layers
    return min(2, n), n // 2, max(n - 3, 0)
