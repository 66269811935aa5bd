"""EAGLE-1/2 heads on disk, in the official layout (config.json + model.safetensors or pytorch_model.bin with keys
embed_tokens.weight, fc.weight, fc.bias, layers.0.*), so heads move both ways; and the heads that ship."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig

from specbench.errors import SpecbenchError
from specbench.methods.common.official import config_values, load_weights, read_config, read_weights, write_checkpoint
from specbench.methods.eagle.head import EagleHead
from specbench.methods.eagle.objective import OBJECTIVE_KEY
from specbench.shipped import shipped_folder

# The default head's folder within a target's folder (heads/eagle/<target>/DEFAULT names it): `shifted` was the first recipe, `self-t0` the same stage 1
# fine-tuned on more of the target's own replies, `self-t0-6m` on more of them for three times as long,
# `self-t0-all` continues it on all of them, and `self-t0-12m`, trained from scratch on all of them for 12M
# positions, is the best of them on the target's own text (docs/eagle-heads.md).


def save_head(head: EagleHead, folder: Path, draft_vocab: torch.Tensor | None, dtype=torch.float16,
              with_embedding: bool = False) -> None:
    """Official layout. The embedding is the target's own, frozen: left out unless asked (official loaders and ours
    take it from the target), which keeps a SmolLM2 head at 9 MB instead of 65 MB."""
    source = head.config.to_dict()
    config = config_values(source)
    config.update(architectures=["LlamaForCausalLM"], model_type="llama", bias=head.fc.bias is not None,
                  num_hidden_layers=1, torch_dtype=str(dtype).removeprefix("torch."),
                  specbench_inputs=source.get("specbench_inputs", "shifted"))
    if source.get("qkv_bias"):  # the official key, read by the official loader (cnets1.py) and ours
        config["qkv_bias"] = True
    if source.get(OBJECTIVE_KEY) is not None:  # what the head was trained with (heads from before: not recorded)
        config[OBJECTIVE_KEY] = source[OBJECTIVE_KEY]
    if draft_vocab is not None:
        config["specbench_draft_vocab"] = [int(t) for t in draft_vocab]
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in head.state_dict().items()
               if with_embedding or k != "embed_tokens.weight"}
    write_checkpoint(folder, config, tensors)


def load_head(folder: Path, target_embedding: torch.Tensor | None = None) -> tuple[EagleHead, torch.Tensor | None]:
    """An EAGLE-1/2 head in the official layout. embed_tokens comes from the target when the file lacks it."""
    raw = read_config(folder, "EAGLE head")
    draft_vocab = raw.pop("specbench_draft_vocab", None)
    inputs = raw.pop("specbench_inputs", "shifted")
    objective = raw.pop(OBJECTIVE_KEY, None)
    bias = raw.pop("bias", True)
    config = LlamaConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "model_type")})
    config.num_hidden_layers = 1
    config._attn_implementation = "sdpa"
    config.bias, config.specbench_inputs = bias, inputs
    setattr(config, OBJECTIVE_KEY, objective)
    state = read_weights(folder, target_embedding)
    head = EagleHead(config)
    load_weights(head, state, folder, "EAGLE-1/2 head")
    return head, None if draft_vocab is None else torch.tensor(draft_vocab, dtype=torch.long)


def find_head(target_name: str, ablation_inputs: str | None = None) -> Path:
    """The shipped head for a target: the one heads/eagle/<target>/DEFAULT names, or one of the four ablation heads
    (trained on the same, smaller budget) in heads/eagle/<target>/ablation/<ablation_inputs>."""
    inputs = ablation_inputs or "shifted"
    within = Path("ablation", ablation_inputs) if ablation_inputs else ""
    folder = shipped_folder("eagle", target_name, within)
    if folder is None:
        where = (f"; the ablation heads stay in the repository (heads/eagle/<target>/ablation/{inputs}), not in the "
                 "wheel: pass that folder of a checkout with --draft" if ablation_inputs else "")
        raise SpecbenchError(
            f"no trained EAGLE head ({inputs}) ships for target {target_name!r}: pass --draft HEAD_FOLDER, or train "
            f"one with python -m specbench train eagle{where}"
        )
    return folder
