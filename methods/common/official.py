"""Checkpoint I/O in the official EAGLE layout, shared by EAGLE-1/2 and EAGLE-3 heads: a LLaMA-style config.json
and model.safetensors (or the older pytorch_model.bin), the embedding left out when it is the target's own."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from specbench.errors import SpecbenchError

SAFETENSORS, BIN = "model.safetensors", "pytorch_model.bin"
# Sizes a LLaMA-style head takes from its target's config (head_config) and writes into its config.json.
CONFIG_KEYS = (
    "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
    "max_position_embeddings", "vocab_size", "hidden_act", "rope_parameters", "attention_bias", "mlp_bias",
)


def head_values(target_config) -> dict[str, Any]:
    """The target's sizes a draft head's Llama layer is built from. A target with a rope per layer kind (Gemma 2/3:
    local and global) gives the head its full-attention rope: the head attends over the whole draft context."""
    values = {k: getattr(target_config, k) for k in CONFIG_KEYS if getattr(target_config, k, None) is not None}
    rope = values.get("rope_parameters")
    if isinstance(rope, dict) and isinstance(rope.get("full_attention"), dict):
        values["rope_parameters"] = rope["full_attention"]
    return values


def config_values(source: dict[str, Any]) -> dict[str, Any]:
    """The head's sizes for config.json, with rope_theta also at the top level, where older loaders (the official
    code, transformers 4.x) read it."""
    config = {k: source[k] for k in CONFIG_KEYS if source.get(k) is not None}
    rope = config.get("rope_parameters") or {}
    if "rope_theta" in rope:
        config["rope_theta"] = rope["rope_theta"]
    return config


def read_config(folder: Path, what: str) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        raise SpecbenchError(f"{folder} has no config.json: not an {what} folder")
    return json.loads(path.read_text())


def write_checkpoint(folder: Path, config: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    """config.json, then the weights written whole (a stop leaves the old file or none, never a cut one)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    tmp = folder / (SAFETENSORS + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.rename(folder / SAFETENSORS)


@torch.inference_mode()
def target_embedding(model) -> torch.Tensor:
    """The target's token embeddings as its first decoder layer receives them: the embedding matrix times the scale
    some families apply (Gemma multiplies by sqrt(hidden size), in the embedding module or in the model's forward).
    The scale is read off the model itself: a least-squares fit of the first hidden state (output_hidden_states[0])
    to the looked-up rows on a few tokens, so no family is named here."""
    weight = model.get_input_embeddings().weight.detach()
    ids = torch.arange(min(8, weight.shape[0]), device=weight.device)[None]
    first = model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states[0][0].float()
    rows = weight[ids[0]].float()
    scale = float((first * rows).sum() / (rows * rows).sum())
    if not torch.allclose(first, rows * scale, rtol=1e-2, atol=1e-3 * float(rows.abs().max())):
        raise SpecbenchError(f"{type(model).__name__}: its first hidden state is not a scaled token embedding "
                             "(position embeddings added?); EAGLE-style heads cannot take its embeddings")
    return weight if abs(scale - 1.0) < 1e-6 else weight * scale


def read_weights(folder: Path, target_embedding: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """The weights, with embed_tokens.weight taken from the target when the file leaves it out."""
    if (folder / SAFETENSORS).is_file():
        state = load_file(str(folder / SAFETENSORS))
    elif (folder / BIN).is_file():
        state = torch.load(folder / BIN, map_location="cpu", weights_only=True)
    else:
        raise SpecbenchError(f"{folder} has neither {SAFETENSORS} nor {BIN}")
    if "embed_tokens.weight" not in state:
        if target_embedding is None:
            raise SpecbenchError(f"{folder} has no embed_tokens.weight and no target embedding was given")
        state["embed_tokens.weight"] = target_embedding
    return state


def load_weights(head: nn.Module, state: dict[str, torch.Tensor], folder: Path, what: str) -> None:
    """Into the head, floating tensors as fp32 (index maps stay exact); one line when they do not fit it."""
    state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    try:
        missing, unexpected = head.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shapes that do not fit the config
        raise SpecbenchError(f"{folder}: not an {what} for this config ({str(exc).splitlines()[-1].strip()})") from None
    if missing or unexpected:
        raise SpecbenchError(f"{folder}: not an {what} (missing {missing}, unexpected {unexpected})")
