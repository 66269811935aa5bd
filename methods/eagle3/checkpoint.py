"""EAGLE-3 checkpoints in the official layout, both ways.

config.json: LLaMA fields (hidden_size, intermediate_size, num_attention_heads, num_key_value_heads, rms_norm_eps,
rope_theta / rope_parameters, max_position_embeddings, vocab_size = the target's), draft_vocab_size, and
target_hidden_size when the target's width differs from the head's. Weights: model.safetensors (or
pytorch_model.bin) with fc.weight, midlayer.*, norm.weight, lm_head.weight, d2t, t2d, and embed_tokens.weight only
when the head cannot take the target's (official heads with target_hidden_size carry it). We add no keys.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig

from specbench.errors import SpecbenchError
from specbench.methods.eagle3.head import Eagle3Head

CONFIG_KEYS = (
    "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
    "max_position_embeddings", "vocab_size", "hidden_act", "rope_parameters", "attention_bias", "mlp_bias",
)
SAFETENSORS, BIN = "model.safetensors", "pytorch_model.bin"


def head_config(target_config, draft_vocab_size: int) -> LlamaConfig:
    values = {k: getattr(target_config, k) for k in CONFIG_KEYS if getattr(target_config, k, None) is not None}
    config = LlamaConfig(**values, num_hidden_layers=1)
    config.draft_vocab_size = draft_vocab_size
    config._attn_implementation = "sdpa"
    return config


def save_head(head: Eagle3Head, folder: Path, dtype: torch.dtype = torch.float16, with_embedding: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    source = head.config.to_dict()
    config = {k: source[k] for k in CONFIG_KEYS if source.get(k) is not None}
    config.update(architectures=["LlamaForCausalLMEagle3"], model_type="llama", num_hidden_layers=1,
                  draft_vocab_size=head.config.draft_vocab_size, torch_dtype=str(dtype).removeprefix("torch."),
                  bias=False)
    if getattr(head.config, "target_hidden_size", None):
        config["target_hidden_size"] = head.config.target_hidden_size
    rope = config.get("rope_parameters") or {}
    if "rope_theta" in rope:  # the official code (transformers 4.x configs) reads it at the top level
        config["rope_theta"] = rope["rope_theta"]
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    tensors = {}
    for key, value in head.state_dict().items():
        if key == "embed_tokens.weight" and not with_embedding:
            continue
        keep = value.dtype in (torch.long, torch.bool)  # the vocabulary maps stay exact
        tensors[key] = value.detach().to("cpu", value.dtype if keep else dtype).contiguous()
    tmp = folder / (SAFETENSORS + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.rename(folder / SAFETENSORS)


def load_head(folder: Path, target_embedding: torch.Tensor | None = None) -> Eagle3Head:
    """An EAGLE-3 head (official or ours). Full-vocabulary heads may lack d2t/t2d: the identity map is used."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise SpecbenchError(f"{folder} has no config.json: not an EAGLE-3 head folder")
    raw = json.loads(config_path.read_text())
    if "draft_vocab_size" not in raw:
        raise SpecbenchError(f"{folder}/config.json has no draft_vocab_size: not an EAGLE-3 head (an EAGLE-1/2 head "
                             "goes with --methods eagle)")
    skip = ("architectures", "model_type", "bias", "torch_dtype", "num_hidden_layers")
    config = LlamaConfig(**{k: v for k, v in raw.items() if k not in skip}, num_hidden_layers=1)
    config._attn_implementation = "sdpa"
    if (folder / SAFETENSORS).is_file():
        state = load_file(str(folder / SAFETENSORS))
    elif (folder / BIN).is_file():
        state = torch.load(folder / BIN, map_location="cpu", weights_only=True)
    else:
        raise SpecbenchError(f"{folder} has neither {SAFETENSORS} nor {BIN}")
    head = Eagle3Head(config)
    if "embed_tokens.weight" not in state:
        if target_embedding is None:
            raise SpecbenchError(f"{folder} has no embed_tokens.weight and no target embedding was given")
        state["embed_tokens.weight"] = target_embedding
    if "d2t" not in state:
        if config.draft_vocab_size != config.vocab_size:
            raise SpecbenchError(f"{folder}: a reduced draft vocabulary needs d2t and t2d")
        state["d2t"] = torch.zeros(config.draft_vocab_size, dtype=torch.long)
        state["t2d"] = torch.ones(config.vocab_size, dtype=torch.bool)
    state = {k: v if v.dtype in (torch.long, torch.bool) else v.float() for k, v in state.items()}
    try:
        missing, unexpected = head.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        raise SpecbenchError(f"{folder}: not an EAGLE-3 head for this config ({str(exc).splitlines()[-1].strip()})") from None
    if missing or unexpected:
        raise SpecbenchError(f"{folder}: not an EAGLE-3 head (missing {missing}, unexpected {unexpected})")
    return head
