"""The seeded tiny target every conformance trace is made on, built the same way under any transformers version.

Imported by the reference side (scripts/conformance/*_reference.py, in a venv of the reference code's own versions)
and by our side (tests/test_conformance.py), so it imports nothing but torch and transformers' LlamaConfig and
LlamaForCausalLM, with only the config keys that every version since 4.36 reads alike. The weights are not the
library's initialisation (which changes between versions) but drawn here, parameter by parameter in name order, from
one seeded generator; `fingerprint` is their SHA-256, which each trace records and the replay checks, so a
different target fails loudly instead of as a diverged trace.

The lm_head row of PLACEHOLDER (token 100) is zero, so the target never picks that token (every other logit is
drawn with a spread of about 4): Saxena's reference drafts token 100 as a placeholder when nothing matches, and so
the placeholder is always rejected there, a one-token step, as ours is with no draft (docs/conformance.md).
"""
from __future__ import annotations

import hashlib

import torch
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, CONTEXT = 160, 64, 4, 4, 2, 512
PLACEHOLDER = 100
SEED = 1234


def config(layers: int = LAYERS) -> LlamaConfig:
    return LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=layers,
                       num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=CONTEXT,
                       tie_word_embeddings=False, rms_norm_eps=1e-6, attention_bias=False)


@torch.no_grad()
def fill(model: torch.nn.Module, seed: int = SEED) -> None:
    """Every parameter from one generator, in name order: norms 1, embeddings N(0, 1), the lm_head N(0, 0.5) (peaked
    next-token distributions: no near-ties for two libraries' float sums to split), other weights N(0, 1/fan_in)."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        if name.endswith("norm.weight"):
            p.fill_(1.0)
            continue
        std = 1.0 if "embed_tokens" in name else 0.5 if name.startswith("lm_head") else p.shape[-1] ** -0.5
        p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * std)
    model.lm_head.weight[PLACEHOLDER] = 0.0


def fingerprint(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        digest.update(name.encode())
        digest.update(p.detach().to(torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


def build(layers: int = LAYERS) -> LlamaForCausalLM:
    """The tiny target; `layers` 8 for EAGLE-3's trace (it fuses the inputs of decoder layers 2, L//2 and L-3, three
    distinct layers only from L = 6 on)."""
    model = LlamaForCausalLM(config(layers)).eval()
    fill(model)
    return model


def prompts(count: int = 4, seed: int = SEED) -> list[list[int]]:
    """Prompts with repeats in them (a phrase said twice, a list with a repeated item), so lookup finds matches in
    the prompt as well as in the output; never the placeholder token."""
    gen = torch.Generator().manual_seed(seed + 1)
    out = []
    for i in range(count):
        words = [int(t) for t in torch.randint(0, VOCAB, (12 + 4 * i,), generator=gen) if int(t) != PLACEHOLDER]
        phrase = words[: 5 + i]
        out.append(words[:6] + phrase + words[6:] + phrase + words[-3:])
    return out


def greedy(model, prompt: list[int], n: int) -> list[int]:
    """The model's own greedy continuation of n tokens (what every trace's output is checked against)."""
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def margins(model, sequence: list[int], start: int) -> float:
    """The smallest gap between the model's top two logits over the positions that predict sequence[start:]."""
    with torch.no_grad():
        logits = model(torch.tensor([sequence])).logits[0, start - 1:-1]
    top = logits.topk(2, dim=-1).values
    return float((top[:, 0] - top[:, 1]).min())
