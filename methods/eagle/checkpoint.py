"""EAGLE-1/2 heads on disk, in the official layout (config.json + model.safetensors or pytorch_model.bin with keys
embed_tokens.weight, fc.weight, fc.bias, layers.0.*), so heads move both ways; and the heads that ship."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig

from specbench.errors import SpecbenchError
from specbench.methods.common.shipped import shipped_folder
from specbench.methods.eagle.head import HEAD_CONFIG_KEYS, EagleHead

# The default head's folder within a target's folder: `shifted` was the first recipe, `self-t0` the same stage 1
# fine-tuned on more of the target's own replies, `self-t0-6m` on more of them for three times as long,
# `self-t0-all` continues it on all of them, and `self-t0-12m`, trained from scratch on all of them for 12M
# positions, is the best of them on the target's own text (README).
DEFAULT_HEAD = "self-t0-12m"
SAFETENSORS, BIN = "model.safetensors", "pytorch_model.bin"


def save_head(head: EagleHead, folder: Path, draft_vocab: torch.Tensor | None, dtype=torch.float16,
              with_embedding: bool = False) -> None:
    """Official layout. The embedding is the target's own, frozen: left out unless asked (official loaders and ours
    take it from the target), which keeps a SmolLM2 head at 9 MB instead of 65 MB."""
    folder.mkdir(parents=True, exist_ok=True)
    source = head.config.to_dict()
    config = {k: source[k] for k in HEAD_CONFIG_KEYS if source.get(k) is not None}
    config.update(architectures=["LlamaForCausalLM"], model_type="llama", bias=head.fc.bias is not None,
                  num_hidden_layers=1, torch_dtype=str(dtype).removeprefix("torch."),
                  specbench_inputs=source.get("specbench_inputs", "shifted"))
    # Older loaders (the official code, transformers 4.x) read rope_theta at the top level.
    rope = config.get("rope_parameters") or {}
    if "rope_theta" in rope:
        config["rope_theta"] = rope["rope_theta"]
    if draft_vocab is not None:
        config["specbench_draft_vocab"] = [int(t) for t in draft_vocab]
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in head.state_dict().items()
               if with_embedding or k != "embed_tokens.weight"}
    tmp = folder / (SAFETENSORS + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.rename(folder / SAFETENSORS)


def load_head(folder: Path, target_embedding: torch.Tensor | None = None) -> tuple[EagleHead, torch.Tensor | None]:
    """An EAGLE-1/2 head in the official layout. embed_tokens comes from the target when the file lacks it."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise SpecbenchError(f"{folder} has no config.json: not an EAGLE head folder")
    raw = json.loads(config_path.read_text())
    draft_vocab = raw.pop("specbench_draft_vocab", None)
    inputs = raw.pop("specbench_inputs", "shifted")
    bias = raw.pop("bias", True)
    config = LlamaConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "model_type")})
    config.num_hidden_layers = 1
    config._attn_implementation = "sdpa"
    config.bias, config.specbench_inputs = bias, inputs
    if (folder / SAFETENSORS).is_file():
        state = load_file(str(folder / SAFETENSORS))
    elif (folder / BIN).is_file():
        state = torch.load(folder / BIN, map_location="cpu", weights_only=True)
    else:
        raise SpecbenchError(f"{folder} has neither {SAFETENSORS} nor {BIN}")
    head = EagleHead(config)
    if "embed_tokens.weight" not in state:
        if target_embedding is None:
            raise SpecbenchError(f"{folder} has no embed_tokens.weight and no target embedding was given")
        state["embed_tokens.weight"] = target_embedding
    try:
        missing, unexpected = head.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    except RuntimeError as exc:  # shapes that do not fit the config
        raise SpecbenchError(f"{folder}: not an EAGLE-1/2 head for this config ({str(exc).splitlines()[-1].strip()})") from None
    if missing or unexpected:
        raise SpecbenchError(f"{folder}: not an EAGLE-1/2 head (missing {missing}, unexpected {unexpected})")
    return head, None if draft_vocab is None else torch.tensor(draft_vocab, dtype=torch.long)


def find_head(target_name: str, ablation_inputs: str | None = None) -> Path:
    """The shipped head for a target: heads/eagle/<target>/<DEFAULT_HEAD>, or one of the four ablation heads
    (trained on the same, smaller budget) in heads/eagle/<target>/ablation/<ablation_inputs>."""
    inputs = ablation_inputs or "shifted"
    within = Path("ablation", ablation_inputs) if ablation_inputs else Path(DEFAULT_HEAD)
    folder = shipped_folder("eagle", target_name, within)
    if folder is None:
        raise SpecbenchError(
            f"no trained EAGLE head ({inputs}) ships for target {target_name!r}: pass --draft HEAD_FOLDER, or train "
            "one with python -m specbench train eagle"
        )
    return folder
