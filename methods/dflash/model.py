"""The DFlash draft model (Chen, Liang and Liu 2026, "DFlash: Block Diffusion for Flash Speculative Decoding"): a few
decoder layers at the target's width that fill a block of mask positions in ONE non-causal forward.

Its condition is the target's context: the hidden states of several target layers at every context position,
concatenated, projected by `fc` and normalised (`hidden_norm`) into one H-wide context feature per position, which
every draft layer reads as extra keys and values ("KV injection": its k_proj and v_proj of the feature, never its
queries or MLP, so the feature stays the same in every layer). A block is [the last emitted token, MASK x (B-1)] at
positions c .. c+B-1 (c: the first position the target has not cached); each block position sees every context
position and the whole block (non-causal), and the logits at block position j (>= 1) draft the token AT c + j. The
embedding and lm_head are the target's (frozen, not saved); the mask is a learned embedding of the draft's own.

z-lab's published drafts (z-lab/dflash) differ in three ways, read from their config: Qwen3 layers (an RMSNorm of
every head's queries and keys, context keys included, before the rotary embedding), the masks as the target's
embedding of `dflash_config.mask_token_id` (a token of its vocabulary), and their own RoPE base; they load as
published (methods/dflash/training.py load_dflash), and tests/test_conformance.py holds them to z-lab's drafts.

The same layer serves inference and training: `forward(hidden, context, ...)` takes the block's hidden states and
the context features, with a SlotCache at inference (context keys written once at their positions, kept across
steps; the block's written after them and overwritten next step) and none in training (all keys in the call).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.cache_utils import Cache
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding, rotate_half

BLOCK_KEY = "dflash_block_size"  # config: tokens per block the draft was trained for (the root and B-1 masks)
LAYERS_KEY = "dflash_target_layers"  # config: the target's output_hidden_states indices it reads
MASK_TOKEN_KEY = "dflash_mask_token_id"  # config (z-lab's drafts): the masks are the target's embedding of this token
QK_NORM_KEY = "dflash_qk_norm"  # config (z-lab's drafts: Qwen3 layers): RMSNorm of each head's queries and keys


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of x [R, heads, n, d] with cos/sin [R, n, d]."""
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


class DFlashLayer(nn.Module):
    """A Llama decoder layer whose attention also reads the context features as keys and values."""

    def __init__(self, config: LlamaConfig, index: int) -> None:
        super().__init__()
        hidden, heads, kv_heads = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        self.index, self.head_dim = index, config.head_dim
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.mlp = LlamaMLP(config)
        self.input_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        qk_norm = getattr(config, QK_NORM_KEY, False)  # Qwen3's: over head_dim, before the rotary embedding
        self.q_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps) if qk_norm else nn.Identity()
        self.k_norm = LlamaRMSNorm(self.head_dim, eps=config.rms_norm_eps) if qk_norm else nn.Identity()

    def forward(self, hidden: torch.Tensor, context: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                mask: torch.Tensor, cache: Cache | None, **cache_kwargs: Any) -> torch.Tensor:
        """hidden [R, m, H] (the block), context [R, c, H] (features of c context positions, c may be 0), rope over
        the c + m positions, mask [R, 1, m, keys] additive over the keys the attention reads: these c + m, or with a
        cache the cache's key slots (the c + m written at `input_pos` first)."""
        rows, m, _ = hidden.shape
        normed = self.input_layernorm(hidden)
        both = torch.cat([context, normed], dim=1)
        cos, sin = rope
        q = self.q_norm(self.q_proj(normed).view(rows, m, -1, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(both).view(rows, both.shape[1], -1, self.head_dim)).transpose(1, 2)
        q, k = rotate(q, cos[:, -m:], sin[:, -m:]), rotate(k, cos, sin)
        v = self.v_proj(both).view(rows, both.shape[1], -1, self.head_dim).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v, self.index, kwargs=cache_kwargs)
        attended = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        hidden = hidden + self.o_proj(attended.transpose(1, 2).reshape(rows, m, -1))
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class DFlashDraft(nn.Module):
    """The draft: fc + hidden_norm (the context feature), the layers, the final norm, a learned mask embedding; the
    target's embedding and lm_head are used, not owned (set by `share`)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        hidden = config.hidden_size
        self.fc = nn.Linear(len(getattr(config, LAYERS_KEY)) * hidden, hidden, bias=False)
        self.hidden_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.layers = nn.ModuleList(DFlashLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.mask_token = getattr(config, MASK_TOKEN_KEY, None)  # z-lab's: a token of the target's vocabulary
        self.mask_embedding = nn.Parameter(torch.randn(hidden) * config.initializer_range) \
            if self.mask_token is None else None
        self.rotary_emb = LlamaRotaryEmbedding(config)
        self.embedding: torch.Tensor | None = None  # the target's (detached: frozen, never saved), set by `share`
        self.lm_head: nn.Linear | None = None  # over the target's weights (frozen, never saved), set by `share`

    def share(self, target: nn.Module) -> "DFlashDraft":
        """Read the target's embedding and lm_head (frozen: never trained or saved; the lm_head a module of the draft,
        so that the runtime's few-token kernels serve it as the draft's other products)."""
        head = target.get_output_embeddings()
        bias = getattr(head, "bias", None)
        self.lm_head = nn.Linear(head.weight.shape[1], head.weight.shape[0], bias=bias is not None, device="meta")
        self.lm_head.weight = nn.Parameter(head.weight.detach(), requires_grad=False)
        if bias is not None:
            self.lm_head.bias = nn.Parameter(bias.detach(), requires_grad=False)
        self.embedding = target.get_input_embeddings().weight.detach()
        return self

    def own_state(self) -> dict[str, torch.Tensor]:
        """The draft's own weights (what a checkpoint holds): all but the target's lm_head."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("lm_head.")}

    @property
    def target_layers(self) -> tuple[int, ...]:
        return tuple(getattr(self.config, LAYERS_KEY))

    @property
    def block_size(self) -> int:
        return int(getattr(self.config, BLOCK_KEY))

    def context(self, features: torch.Tensor) -> torch.Tensor:
        """The target's concatenated layer states [..., kH] -> the context feature [..., H]."""
        return self.hidden_norm(self.fc(features.to(self.fc.weight.dtype)))

    def block_inputs(self, roots: torch.Tensor, size: int) -> torch.Tensor:
        """The block's input embeddings [R, size, H]: each row's root token, then masks (a learned embedding, or
        the target's embedding of the mask token)."""
        assert self.embedding is not None, "share(target) first"
        dtype = self.fc.weight.dtype
        root = nn.functional.embedding(roots, self.embedding).to(dtype)[:, None]
        mask = self.mask_embedding if self.mask_token is None else self.embedding[self.mask_token].to(dtype)
        return torch.cat([root, mask.expand(roots.shape[0], size - 1, -1)], dim=1)

    def hidden_states(self, block: torch.Tensor, context: torch.Tensor, position_ids: torch.Tensor,
                      mask: torch.Tensor, cache: Cache | None = None, **cache_kwargs: Any) -> torch.Tensor:
        """The block's final hidden states [R, m, H] (after the norm): block inputs [R, m, H], context features
        [R, c, H], position_ids [R, c + m], mask as DFlashLayer.forward's."""
        rope = self.rotary_emb(block, position_ids)
        for layer in self.layers:
            block = layer(block, context, rope, mask, cache, **cache_kwargs)
        return self.norm(block)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        assert self.lm_head is not None, "share(target) first"
        return self.lm_head(hidden)

    def forward(self, input_ids: torch.Tensor, features: torch.Tensor, position_ids: torch.Tensor,
                attention_mask: torch.Tensor, cache: Cache | None = None, logits_to_keep: int = 0,
                **kwargs: Any) -> torch.Tensor:
        """A drafting forward (a ModelRunner's call): input_ids [R, m] (column 0 each row's root; the rest are
        masks, their ids unread), features [R, c, kH] the target states of the c context positions fed now,
        position_ids [R, c + m] (also the cache slots written: `input_pos`), attention_mask [R, 1, m, key_slots]
        -> the logits of the last `logits_to_keep` block positions [R, keep, V]."""
        block = self.block_inputs(input_ids[:, 0], input_ids.shape[1])
        cache_kwargs = ({name: kwargs[name] for name in ("input_pos", "key_slots", "cache_rows") if name in kwargs}
                        if cache is not None else {})
        hidden = self.hidden_states(block, self.context(features), position_ids, attention_mask, cache, **cache_kwargs)
        return self.logits(hidden[:, -logits_to_keep:] if logits_to_keep else hidden)


def dflash_config(target: LlamaConfig | Any, layers: int, block_size: int, target_layers: tuple[int, ...]
                  ) -> LlamaConfig:
    """A draft of `layers` layers at the target's width, heads and MLP size."""
    config = LlamaConfig(
        vocab_size=target.vocab_size, hidden_size=target.hidden_size, intermediate_size=target.intermediate_size,
        num_hidden_layers=layers, num_attention_heads=target.num_attention_heads,
        num_key_value_heads=target.num_key_value_heads, rms_norm_eps=target.rms_norm_eps,
        head_dim=getattr(target, "head_dim", None) or target.hidden_size // target.num_attention_heads,
        max_position_embeddings=target.max_position_embeddings, rope_parameters=target.rope_parameters,
        tie_word_embeddings=False,
    )
    setattr(config, BLOCK_KEY, block_size)
    setattr(config, LAYERS_KEY, list(target_layers))
    return config
