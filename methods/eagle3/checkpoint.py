"""EAGLE-3 checkpoints in the official layout, both ways.

config.json: LLaMA fields (hidden_size, intermediate_size, num_attention_heads, num_key_value_heads, rms_norm_eps,
rope_theta / rope_parameters, max_position_embeddings, vocab_size = the target's), draft_vocab_size, and
target_hidden_size when the target's width differs from the head's. Weights: model.safetensors (or
pytorch_model.bin) with fc.weight, midlayer.*, norm.weight, lm_head.weight, d2t, t2d, and embed_tokens.weight only
when the head cannot take the target's (official heads with target_hidden_size carry it). We add no keys.
vLLM's speculators layout (config.json with speculators_model_type "eagle3", the layer config nested as
transformer_layer_config; layers.0.* for midlayer.*) and the variant flags' norms (input_norm, fc_norm.{0,1,2}) load
too.
"""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig

from specbench.errors import SpecbenchError
from specbench.methods.common.official import (
    config_values,
    head_values,
    load_weights,
    read_config,
    read_weights,
    write_checkpoint,
)
from specbench.methods.eagle3.head import Eagle3Head


def head_config(target_config, draft_vocab_size: int) -> LlamaConfig:
    config = LlamaConfig(**head_values(target_config), num_hidden_layers=1)
    config.draft_vocab_size = draft_vocab_size
    config._attn_implementation = "sdpa"
    return config


def save_head(head: Eagle3Head, folder: Path, dtype: torch.dtype = torch.float16, with_embedding: bool = False) -> None:
    config = config_values(head.config.to_dict())
    config.update(architectures=["LlamaForCausalLMEagle3"], model_type="llama", num_hidden_layers=1,
                  draft_vocab_size=head.config.draft_vocab_size, torch_dtype=str(dtype).removeprefix("torch."),
                  bias=False)
    if getattr(head.config, "target_hidden_size", None):
        config["target_hidden_size"] = head.config.target_hidden_size
    tensors = {}
    for key, value in head.state_dict().items():
        if key == "embed_tokens.weight" and not with_embedding:
            continue
        keep = value.dtype in (torch.long, torch.bool)  # the vocabulary maps stay exact
        tensors[key] = value.detach().to("cpu", value.dtype if keep else dtype).contiguous()
    write_checkpoint(folder, config, tensors)


# Head variants vLLM / speculators define (methods/eagle3/head.py); the official EAGLE-3 head is each flag's false.
VARIANT_FLAGS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
FLAG_WEIGHTS = {"norm_before_fc": "input_norm.weight", "fc_norm": "fc_norm.0.weight"}


def speculators_config(raw: dict, folder: Path) -> dict:
    """A speculators (vLLM) EAGLE-3 config as the official layout's: the head's layer config is
    transformer_layer_config; draft_vocab_size, target_hidden_size, the aux layer ids (input of layer i, as
    vLLM reads them) and the variant flags are top-level (a missing norm_before_residual is true, as vLLM reads it)."""
    if raw.get("speculators_model_type") != "eagle3":
        raise SpecbenchError(f"{folder}: a speculators checkpoint of type {raw.get('speculators_model_type')!r}; "
                             "eagle3 reads its eagle3 ones")
    layer = dict(raw.get("transformer_layer_config") or {})
    if layer.get("model_type", "llama") != "llama":
        raise SpecbenchError(f"{folder}: a {layer.get('model_type')} draft layer (q/k norms): eagle3 reads Llama ones")
    if int(layer.get("num_hidden_layers", 1)) != 1 or "sliding_attention" in (layer.get("layer_types") or []) or \
            layer.get("attention_bias"):
        raise SpecbenchError(f"{folder}: more than one draft layer, sliding-window attention or attention biases: "
                             "an EAGLE-3 head variant not read here")
    config = {k: v for k, v in layer.items() if k not in ("layer_types", "sliding_window", "use_sliding_window",
                                                          "mlp_bias", "attention_bias", "transformers_version")}
    for key in ("draft_vocab_size", "target_hidden_size", "eagle_aux_hidden_state_layer_ids", *VARIANT_FLAGS):
        if raw.get(key) is not None:
            config[key] = raw[key]
    config.setdefault("norm_before_residual", True)
    return config


def speculators_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """speculators' weight names under the official ones (layers.0.* is midlayer.*)."""
    return {("midlayer." + k.removeprefix("layers.0.")) if k.startswith("layers.0.") else k: v
            for k, v in state.items() if not k.startswith("verifier_")}


def aux_layers(raw: dict, folder: Path) -> tuple[int, ...] | None:
    """The target layers the head was trained on, as output_hidden_states indices (index i: the input of decoder
    layer i, as fused_layers gives them), or None: the official choice (fused_layers). SpecForge's export nests them
    as eagle_config.eagle_aux_hidden_state_layer_ids, counting the OUTPUT of layer i (SGLang captures the input of
    layer i + 1): index i + 1. vLLM reads eagle_aux_hidden_state_layer_ids at the top level as the INPUT of layer i:
    index i."""
    nested = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    ids = [i + 1 for i in nested.get("eagle_aux_hidden_state_layer_ids") or []] or \
        list(raw.get("eagle_aux_hidden_state_layer_ids") or [])
    if not ids:
        return None
    if len(ids) != 3 or not all(isinstance(i, int) and i >= 0 for i in ids):
        raise SpecbenchError(f"{folder}/config.json: eagle_aux_hidden_state_layer_ids {ids} (as hidden-state indices): "
                             "an EAGLE-3 head here fuses three target layers")
    return tuple(ids)


def load_head(folder: Path, target_embedding: torch.Tensor | None = None) -> Eagle3Head:
    """An EAGLE-3 head (official, SpecForge's, vLLM speculators' or ours). Full-vocabulary heads may lack d2t/t2d: the identity map is
    used. The target layers it reads: config.aux_layer_ids (None: the official ones)."""
    raw = read_config(folder, "EAGLE-3 head")
    speculators = "speculators_model_type" in raw or "speculators_config" in raw
    if speculators:
        raw = speculators_config(raw, folder)
    if "draft_vocab_size" not in raw:
        raise SpecbenchError(f"{folder}/config.json has no draft_vocab_size: not an EAGLE-3 head (an EAGLE-1/2 head "
                             "goes with --methods eagle)")
    if raw.get("fc_norm") and raw.get("norm_before_fc"):
        raise SpecbenchError(f"{folder}/config.json sets both fc_norm and norm_before_fc (speculators forbids it)")
    layers = aux_layers(raw, folder)
    skip = ("architectures", "model_type", "bias", "torch_dtype", "num_hidden_layers", "eagle_config",
            "eagle_aux_hidden_state_layer_ids", *VARIANT_FLAGS)
    config = LlamaConfig(**{k: v for k, v in raw.items() if k not in skip}, num_hidden_layers=1)
    for flag in VARIANT_FLAGS:
        setattr(config, flag, bool(raw.get(flag)))
    config.aux_layer_ids = layers
    config._attn_implementation = "sdpa"
    state = read_weights(folder, target_embedding)
    if speculators:
        state = speculators_state(state)
    lacking = [f"{flag} ({weight})" for flag, weight in FLAG_WEIGHTS.items() if raw.get(flag) and weight not in state]
    if lacking:  # speculators' converter drops these weights while keeping the flag
        raise SpecbenchError(f"{folder}: its config sets {', '.join(lacking)} but the weights are not in the file")
    head = Eagle3Head(config)
    if "d2t" not in state:
        if config.draft_vocab_size != config.vocab_size:
            raise SpecbenchError(f"{folder}: a reduced draft vocabulary needs d2t and t2d")
        state["d2t"] = torch.zeros(config.draft_vocab_size, dtype=torch.long)
        state["t2d"] = torch.ones(config.vocab_size, dtype=torch.bool)
    load_weights(head, state, folder, "EAGLE-3 head")
    return head
