"""The small draft LM trained here (sps's, and pard's adapted from it): a Llama of the target's width with a few decoder
layers, started from the target's first layers and sharing its frozen embedding and lm_head; on disk only its own
layers are saved."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel

from specbench.errors import SpecbenchError

SHARED_KEY = "specbench_shared_embedding"
# A draft trained to read mask tokens (PARD's): AMD's published drafts (amd/PARD-*) name it pard_token, ours
# specbench_pard_mask_token. Such a draft proposes K tokens in one forward; read one at a time it is another method.
MASK_TOKEN_KEYS = ("pard_token", "specbench_pard_mask_token")


def mask_token_of(folder: Path) -> int | None:
    """The mask token id a draft folder's config.json names, or None (not a mask-token draft)."""
    config = folder / "config.json"
    if not config.is_file():
        return None
    raw = json.loads(config.read_text())
    return next((int(raw[k]) for k in MASK_TOKEN_KEYS if raw.get(k) is not None), None)


def small_draft(target: PreTrainedModel, layers: int) -> LlamaForCausalLM:
    """A Llama with the target's width and `layers` decoder layers, started from the target's first layers, final
    norm, embedding and lm_head (the last two frozen and shared)."""
    t = target.config
    config = LlamaConfig(
        vocab_size=t.vocab_size, hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
        num_hidden_layers=layers, num_attention_heads=t.num_attention_heads,
        num_key_value_heads=t.num_key_value_heads, rms_norm_eps=t.rms_norm_eps,
        max_position_embeddings=t.max_position_embeddings, rope_parameters=t.rope_parameters,
        tie_word_embeddings=False, bos_token_id=t.bos_token_id, eos_token_id=t.eos_token_id,
    )
    draft = LlamaForCausalLM(config)
    body = target.get_decoder()
    with torch.no_grad():
        for mine, theirs in zip(draft.model.layers, body.layers):
            mine.load_state_dict(theirs.state_dict())
        draft.model.norm.load_state_dict(body.norm.state_dict())
    share_embeddings(draft, target)
    return draft


def share_embeddings(draft: PreTrainedModel, target: PreTrainedModel) -> None:
    draft.model.embed_tokens.weight = target.get_input_embeddings().weight
    draft.lm_head.weight = target.get_output_embeddings().weight
    draft.model.embed_tokens.weight.requires_grad_(False)
    draft.lm_head.weight.requires_grad_(False)

def save_small_draft(draft: LlamaForCausalLM, folder: Path, draft_vocab: torch.Tensor | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    config = draft.config.to_dict()
    config[SHARED_KEY] = True
    if draft_vocab is not None:
        config["specbench_draft_vocab"] = [int(t) for t in draft_vocab]
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    own = {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in draft.state_dict().items()
           if k not in ("model.embed_tokens.weight", "lm_head.weight")}
    save_file(own, str(folder / "model.safetensors"))


def load_small_draft(folder: Path, target: PreTrainedModel) -> tuple[LlamaForCausalLM, torch.Tensor | None]:
    raw = json.loads((folder / "config.json").read_text())
    vocab = raw.pop("specbench_draft_vocab", None)
    raw.pop(SHARED_KEY, None)
    config = LlamaConfig(**{k: v for k, v in raw.items()  # specbench_*: a method's own keys (pard's mask token)
                          if k not in ("architectures", "model_type") and not k.startswith("specbench_")})
    if config.hidden_size != target.config.hidden_size or config.vocab_size != target.config.vocab_size:
        raise SpecbenchError(f"draft {folder} does not fit the target (hidden or vocabulary size)")
    draft = LlamaForCausalLM(config)
    share_embeddings(draft, target)
    missing, unexpected = draft.load_state_dict({k: v.float() for k, v in load_file(str(folder / "model.safetensors")).items()},
                                                strict=False)
    if unexpected or set(missing) - {"model.embed_tokens.weight", "lm_head.weight"}:
        raise SpecbenchError(f"{folder}: weights do not match its config")
    draft.to(target.device, target.dtype).eval()
    return draft, None if vocab is None else torch.tensor(vocab, dtype=torch.long)


def is_small_draft(folder: Path) -> bool:
    config = folder / "config.json"
    return config.is_file() and json.loads(config.read_text()).get(SHARED_KEY, False)
