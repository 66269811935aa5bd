"""Loading a target (or draft) model: an HF model id, a local folder, or a short name shipped as a package."""
from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GgufConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from specbench.decode.layout import AttentionLayout
from specbench.decode.model_files import resolve
from specbench.decode.names import Runtime, is_shape
from specbench.decode.runner import ModelRunner
from specbench.decode.runtime import RuntimeInfo, prepare
from specbench.decode.shapes import shape_model
from specbench.errors import SpecbenchError


@dataclass
class LoadedModel:
    name: str  # as the user gave it
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    runtime: RuntimeInfo | None = None
    runner: ModelRunner | None = None  # its forwards and cache, kept for the run (load_model sets it)

    @property
    def stop_ids(self) -> set[int]:
        ids: set[int] = set()
        for value in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if isinstance(value, int):
                ids.add(value)
            elif value is not None:
                ids.update(value)
        return ids


def pick_device(requested: str | None) -> torch.device:
    if requested and requested != "auto":
        return torch.device(requested)
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def pick_dtype(requested: str | None, device: torch.device) -> torch.dtype:
    if requested and requested != "auto":
        dtype = getattr(torch, requested, None)
        if not isinstance(dtype, torch.dtype):
            raise SpecbenchError(f"unknown dtype {requested!r} (use float32, float16 or bfloat16)")
        return dtype
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def _load_error(name: str, exc: Exception) -> SpecbenchError:
    offline = " (offline? set HF_HUB_OFFLINE=1 and use a local folder)" if "/" in name else ""
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return SpecbenchError(f"cannot load model {name!r}: {first_line}{offline}")


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """The target's tokenizer alone (no weights)."""
    where, extra = resolve(name)
    try:
        return AutoTokenizer.from_pretrained(where, **extra)
    except (OSError, ValueError) as exc:
        raise _load_error(name, exc) from None


def mla_heads(config: Any) -> dict[str, int]:
    """The config value an MLA target (DeepSeek V2/V3, GLM-4 MoE Lite, Kimi...: those with kv_lora_rank) must load
    with: MLA expands its latent into keys and values for every query head, yet transformers (5.24) repeats those
    keys num_attention_heads // num_key_value_heads times once attention gets a mask (every verification forward
    does), which fails for fewer key/value heads than query heads. num_key_value_heads = num_attention_heads is the
    same model (no weight depends on it) without the repetition."""
    heads = getattr(config, "num_attention_heads", None)
    if getattr(config, "kv_lora_rank", None) and heads and getattr(config, "num_key_value_heads", heads) != heads:
        return {"num_key_value_heads": heads}
    return {}


def load_model(name: str, device: str | None = None, dtype: str | None = None,
               runtime: Runtime | str = "auto", unpacked: Path | None = None) -> LoadedModel:
    """A model ready to decode, with its runtime set up (specbench.decode.runtime; stock kernels leave
    transformers' modules; a runtime is a Runtime or one of names.RUNTIME_NAMES). A GGUF file loads as plain
    weights in the run's dtype, unpacked once (transformers would otherwise keep its quantized blocks and cast them
    at every product). `unpacked`: a folder where a GGUF's unpacked model is kept (as save_pretrained writes it,
    per file and dtype) and loaded from by later loads: parsing the GGUF costs ~20 s a load on two cores."""
    where, extra = resolve(name)
    dev = pick_device(device)
    dt = pick_dtype(dtype, dev)
    kept = unpacked_folder(unpacked, where, extra, dt) if unpacked is not None and not is_shape(name) else None
    if kept is not None and (kept / "config.json").is_file():
        where, extra = str(kept), {}  # unpacked by an earlier load: the same tensors, without parsing the GGUF
    gguf = {"quantization_config": GgufConfig(dequantize=True)} if "gguf_file" in extra else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, **extra)
        heads = mla_heads(AutoConfig.from_pretrained(where, **extra))
        model = (shape_model(name, dev, dt) if is_shape(name)
                 else AutoModelForCausalLM.from_pretrained(where, dtype=dt, **extra, **heads, **gguf))
    except (OSError, ValueError) as exc:
        raise _load_error(name, exc) from None
    if kept is not None and gguf:
        keep_unpacked(model, tokenizer, kept)
    AttentionLayout.of(model.config)  # a recurrent or hybrid family is refused here, before anything is decoded
    model.to(dev).eval()
    info = prepare(model, runtime)
    return LoadedModel(name, model, tokenizer, info, ModelRunner(model, fixed_shapes=info.fixed_shapes,
                                                                     compiled=info.compiled))


def unpacked_folder(root: Path, where: str, extra: dict, dtype: torch.dtype) -> Path | None:
    """Where a GGUF file's unpacked model is kept under root: one folder per file (path, size, modification time),
    dtype and transformers release; None for a model that is no GGUF file."""
    if "gguf_file" not in extra:
        return None
    path = (Path(where) / extra["gguf_file"]).resolve()
    stat = path.stat()
    key = f"{path}:{stat.st_size}:{stat.st_mtime_ns}:{dtype}:{transformers.__version__}"
    return root / f"{path.stem}-{str(dtype).removeprefix('torch.')}-{hashlib.sha1(key.encode()).hexdigest()[:12]}"


def keep_unpacked(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    """Save a GGUF's unpacked model and tokenizer for later loads, whole or not at all (written aside, then renamed;
    a cache that cannot be written keeps nothing)."""
    partial = folder.with_name(f".{folder.name}.{os.getpid()}.partial")
    try:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        partial.rename(folder)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)


def chat_tokens(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]],
                generation_prompt: bool = True) -> list[int]:
    """Token ids of a conversation through the chat template, ending with the assistant's turn to speak when
    `generation_prompt`. A tokenizer without a template (a base model, e.g. the packaged Gemma 3 270M): the turns'
    texts joined by blank lines."""
    if tokenizer.chat_template:
        encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True)
        ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        return list(ids)
    return tokenizer("\n\n".join(m["content"] for m in messages))["input_ids"]
