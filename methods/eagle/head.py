"""The EAGLE-1/2 draft head: fc (2H -> H) over concat[embedding of token t+1, feature t] (embedding first), then one
LLaMA decoder layer without its input norm, predicting feature t+1; built from the target's config."""
from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from specbench.errors import SpecbenchError
from specbench.methods.common.official import head_values

# What the head reads at position t, by variant: (token offset, uses token, uses feature).
# "shifted" is EAGLE: token t+1 with feature t. The others are the paper's ablations.
INPUTS = {"shifted": (1, True, True), "unshifted": (0, True, True), "feature": (0, False, True), "token": (1, True, False)}


def head_config(target_config, inputs: str = "shifted") -> LlamaConfig:
    config = LlamaConfig(**head_values(target_config), num_hidden_layers=1)
    config._attn_implementation = "sdpa"
    config.bias = True
    config.specbench_inputs = inputs
    return config


def decoder_layer(config: LlamaConfig) -> LlamaDecoderLayer:
    """The head's one LLaMA layer. `qkv_bias` (the official EAGLE-1/2 heads of Qwen2 targets, cnets1.py): q, k and v
    with a bias and o without, which Llama's `attention_bias` (all four or none) cannot say."""
    if not getattr(config, "qkv_bias", False):
        return LlamaDecoderLayer(config, layer_idx=0)
    biased = copy.copy(config)
    biased.attention_bias = True
    layer = LlamaDecoderLayer(biased, layer_idx=0)
    out = layer.self_attn.o_proj
    layer.self_attn.o_proj = nn.Linear(out.in_features, out.out_features, bias=bool(config.attention_bias))
    return layer


class EagleHead(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        inputs = getattr(config, "specbench_inputs", "shifted")
        if inputs not in INPUTS:
            raise SpecbenchError(f"unknown EAGLE head inputs {inputs!r}; valid: {', '.join(INPUTS)}")
        self.shift, self.use_token, self.use_feature = INPUTS[inputs]
        hidden = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, hidden)
        self.embed_tokens.weight.requires_grad_(False)
        self.fc = nn.Linear(2 * hidden, hidden, bias=getattr(config, "bias", True))
        layer = decoder_layer(config)
        layer.input_layernorm = nn.Identity()  # EAGLE's layer has no input norm: fc output goes straight in
        self.layers = nn.ModuleList([layer])
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def forward(
        self,
        tokens: torch.Tensor,  # [B, n]
        features: torch.Tensor,  # [B, n, H]
        position_ids: torch.Tensor,  # [B, n]
        attention_mask: torch.Tensor | None,  # [B, 1, n, cached + n] additive, None = see everything
        cache: DynamicCache | None = None,
        **cache_kwargs: torch.Tensor | int,
    ) -> torch.Tensor:
        """Predicted next features [B, n, H]. cache_kwargs: where the cache writes and reads (kv.SlotCache)."""
        embedded = self.embed_tokens(tokens)
        if not self.use_token:
            embedded = torch.zeros_like(embedded)
        if not self.use_feature:
            features = torch.zeros_like(features)
        hidden = self.fc(torch.cat([embedded, features.to(embedded.dtype)], dim=-1))
        rope = self.rotary_emb(hidden, position_ids)
        return self.layers[0](hidden, attention_mask=attention_mask, position_ids=position_ids,
                              cache=cache, use_cache=cache is not None, position_embeddings=rope, **cache_kwargs)
