"""The EAGLE-3 draft head (Li et al. 2025), laid out as the official code lays it out (eagle/model/cnets.py).

fc fuses the target's hidden states at the inputs of decoder layers 2, L//2 and L-3 (3H -> H, no bias). One decoder
layer, `midlayer`, attends over concat[input_layernorm(embedding of the token), hidden_norm(hidden)] (q/k/v read
2H), adds the attention to the hidden state, then post_attention_layernorm and a SwiGLU MLP. Its output is the
head's own hidden state: deeper draft steps feed it back in place of the fused target features (it is H wide, so fc
is skipped), and draft logits are lm_head(norm(hidden)) over a reduced draft vocabulary; d2t maps a draft index to
the target's token id (target = draft + d2t[draft]) and t2d marks the target tokens the draft vocabulary holds.

The variants vLLM and speculators define, each off in the official head, are config flags: norm_before_fc (an
RMSNorm over the fused 3H' states before fc), fc_norm (an RMSNorm per fused layer, "EAGLE 3.1"), norm_before_residual
(the layer's residual is hidden_norm(hidden)) and norm_output (the state fed back is norm(hidden)).
"""
from __future__ import annotations

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from specbench.methods.common.target_layers import fused_layers  # noqa: F401  (EAGLE-3's layers, named here too)


class Eagle3Layer(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.self_attn = LlamaAttention(config, layer_idx=0)
        # The attention reads the embedding and the hidden state side by side.
        for name in ("q_proj", "k_proj", "v_proj"):
            old = getattr(self.self_attn, name)
            setattr(self.self_attn, name, nn.Linear(2 * hidden, old.out_features, bias=False))
        self.mlp = LlamaMLP(config)
        self.hidden_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.input_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.norm_before_residual = bool(getattr(config, "norm_before_residual", False))

    def forward(self, embedded: torch.Tensor, hidden: torch.Tensor, position_embeddings: tuple[torch.Tensor, torch.Tensor],
                attention_mask: torch.Tensor | None, cache: DynamicCache | None, **cache_kwargs: torch.Tensor | int
                ) -> torch.Tensor:
        normed = self.hidden_norm(hidden)
        residual = normed if self.norm_before_residual else hidden
        both = torch.cat([self.input_layernorm(embedded), normed], dim=-1)
        attended, _ = self.self_attn(both, position_embeddings=position_embeddings, attention_mask=attention_mask,
                                     cache=cache, **cache_kwargs)
        return self.feed_forward(residual + attended)

    def feed_forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """The MLP half of the layer, after the attention's residual."""
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class Eagle3Head(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        hidden = config.hidden_size
        target_hidden = getattr(config, "target_hidden_size", None) or hidden
        self.embed_tokens = nn.Embedding(config.vocab_size, hidden)
        self.embed_tokens.weight.requires_grad_(False)
        self.fc = nn.Linear(3 * target_hidden, hidden, bias=False)
        # The variants' norms of the fused target states before fc (vLLM / speculators: norm_before_fc, one over
        # all three; fc_norm, one per layer); and norm_output: the state fed back is norm(hidden).
        self.input_norm = LlamaRMSNorm(3 * target_hidden, eps=config.rms_norm_eps) \
            if getattr(config, "norm_before_fc", False) else None
        self.fc_norm = nn.ModuleList(LlamaRMSNorm(target_hidden, eps=config.rms_norm_eps) for _ in range(3)) \
            if getattr(config, "fc_norm", False) else None
        self.norm_output = bool(getattr(config, "norm_output", False))
        self.midlayer = Eagle3Layer(config)
        self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(config.vocab_size, dtype=torch.bool))
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def forward(self, tokens: torch.Tensor, features: torch.Tensor, position_ids: torch.Tensor,
                attention_mask: torch.Tensor | None, cache: DynamicCache | None = None,
                **cache_kwargs: torch.Tensor | int) -> torch.Tensor:
        """tokens [B, n], features [B, n, 3H'] (fused target states) or [B, n, H] (the head's own), position_ids
        [B, n], attention_mask [B, 1, n, cached + n] additive or None -> the head's hidden states [B, n, H].
        cache_kwargs: where the cache writes and reads (kv.SlotCache)."""
        embedded, features = self.inputs(tokens, features)
        rope = self.rotary_emb(features, position_ids)
        out = self.midlayer(embedded, features, rope, attention_mask, cache, **cache_kwargs)
        return self.norm(out) if self.norm_output else out

    def inputs(self, tokens: torch.Tensor, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The token embeddings and the H-wide hidden state the layer reads: fused target states go through fc,
        the head's own states (deeper steps) as they are."""
        embedded = self.embed_tokens(tokens)
        features = features.to(embedded.dtype)
        if features.shape[-1] != self.config.hidden_size:
            if self.input_norm is not None:
                features = self.input_norm(features)
            if self.fc_norm is not None:
                features = torch.cat([norm(part) for norm, part in zip(self.fc_norm, features.chunk(3, dim=-1))], -1)
            features = self.fc(features)
        return embedded, features

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Draft logits over the draft vocabulary (of the head's normed state: norm_output heads return it normed)."""
        return self.lm_head(hidden if self.norm_output else self.norm(hidden))

    def draft_to_target(self) -> torch.Tensor:
        return torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t
