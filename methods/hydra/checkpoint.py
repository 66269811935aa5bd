"""Hydra heads on disk, as published and as trained here.

- Published (zankner/Hydra, `ankner/hydra-*`): config.json (hydra_num_heads, hydra_num_layers, hydra_head_arch,
  grounded_heads, hidden_state_offset; no hidden_size) and hydra_lm_head.pt (or the same keys as .safetensors):
  - `mlp`: hydra_mlp.{k}.{j}.* (j = 0 the first block, 1.. copies of the one shared block) and hydra_lm_head.{k}.*;
  - `prefix-mlp` (Hydra++): the heads are Sequential(Dropout, block, Dropout, shared block, ...), so the blocks are
    hydra_mlp.{k}.{1,3,5,..}.* and the lm_heads hydra_lm_head.{k}.1.*; the prefix layer prefix_embeding_layer.*
    (a one-layer LlamaModel; its embed_tokens is never used).
  Both hold input_embed_fn.weight, a copy of the target's embeddings (the reference writes it INTO the target on
  load): not read here, where the heads read the target's own.
- Ours (`train hydra`): config.json with hidden_size, shared_lm_head and our draft vocabulary, model.safetensors
  with the `mlp` keys and no lm_heads (heads that share the target's lm_head); `arch=prefix-mlp` adds the
  prefix layer (prefix.*, without its unused embed_tokens) and the own lm_heads (hydra_lm_head.{k}.*, over the
  draft vocabulary), shared_lm_head false.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import PretrainedConfig

from specbench.errors import SpecbenchError
from specbench.methods.hydra.head import ARCHS, HydraHeads, prefix_config

HEAD_FILES = ("hydra_lm_head.safetensors", "hydra_lm_head.pt")


def save_heads(heads: HydraHeads, folder: Path, draft_vocab: torch.Tensor | None, teacher: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    config = {"hydra_num_heads": len(heads), "hydra_num_layers": heads.n_layers, "hydra_head_arch": heads.arch,
              "grounded_heads": True, "hidden_state_offset": 0, "hidden_size": heads.hidden,
              "shared_lm_head": heads.hydra_lm_head is None, "specbench_teacher_distillation": teacher}
    if draft_vocab is not None:
        config["specbench_draft_vocab"] = [int(t) for t in draft_vocab]
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    state = {k: v for k, v in heads.state_dict().items() if k != "prefix.embed_tokens.weight"}
    save_file({k: v.detach().to("cpu", torch.float16).clone().contiguous() for k, v in state.items()},
              str(folder / "model.safetensors"))


def _published_state(folder: Path) -> dict[str, torch.Tensor]:
    for name in HEAD_FILES:
        path = folder / name
        if path.is_file():
            state = torch.load(path, map_location="cpu", weights_only=True) if path.suffix == ".pt" \
                else load_file(str(path))
            return {k: v.float() for k, v in state.items()}
    raise SpecbenchError(f"{folder} is not a Hydra head folder: no model.safetensors with our heads and no "
                         f"{' or '.join(HEAD_FILES)} (the published layout)")


def _renamed(state: dict[str, torch.Tensor], arch: str) -> dict[str, torch.Tensor]:
    """The published keys under our module names (prefix-mlp's Dropout slots taken out of the block indices)."""
    out = {}
    for key, value in state.items():
        if key == "input_embed_fn.weight" or key.endswith("rotary_emb.inv_freq"):
            continue  # the target's embeddings; the RoPE table (rebuilt)
        if arch == "prefix-mlp":
            key = re.sub(r"^hydra_mlp\.(\d+)\.(\d+)\.", lambda m: f"hydra_mlp.{m[1]}.{(int(m[2]) - 1) // 2}.", key)
            key = re.sub(r"^hydra_lm_head\.(\d+)\.1\.", r"hydra_lm_head.\1.", key)
            key = key.replace("prefix_embeding_layer.", "prefix.", 1)
        out[key] = value
    return out


def _check_config(folder: Path, config: dict) -> tuple[str, int, int]:
    heads, layers = config.get("hydra_num_heads"), config.get("hydra_num_layers")
    if not all(isinstance(s, int) and s > 0 for s in (heads, layers)):
        raise SpecbenchError(f"{folder} is not a Hydra head folder (its config.json lacks hydra_num_heads or "
                             "hydra_num_layers)")
    arch = config.get("hydra_head_arch", "mlp")
    if arch not in ARCHS:
        raise SpecbenchError(f"{folder}: hydra_head_arch {arch!r} is not read here (only {' and '.join(ARCHS)}, the "
                             "architectures of the published heads)")
    if not config.get("grounded_heads"):
        raise SpecbenchError(f"{folder}: grounded_heads is false (Medusa-style heads, which no published Hydra "
                             "checkpoint uses): run them as medusa heads")
    if config.get("hidden_state_offset", 0) != 0:
        raise SpecbenchError(f"{folder}: hidden_state_offset={config['hidden_state_offset']} (the reference's "
                             "generation fails on anything but 0): not read")
    return arch, heads, layers


def load_heads(folder: Path, target: PretrainedConfig | None = None) -> tuple[HydraHeads, torch.Tensor | None]:
    """The heads (own lm_heads, or the target's shared: as the folder has them) and our draft vocabulary (None: the
    full one). target: the target's config (Hydra++'s prefix layer takes its shape)."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise SpecbenchError(f"{folder} is not a Hydra head folder (no config.json)")
    config = json.loads(config_path.read_text())
    arch, n_heads, n_layers = _check_config(folder, config)
    if arch == "prefix-mlp" and target is None:
        raise ValueError("Hydra++ heads (prefix-mlp) load for a target: pass its config")
    ours = "hidden_size" in config and (folder / "model.safetensors").is_file()  # the published have no hidden_size
    state = {k: v.float() for k, v in load_file(str(folder / "model.safetensors")).items()} if ours \
        else _renamed(_published_state(folder), arch)
    first = state.get("hydra_mlp.0.0.linear.weight")
    if first is None:
        raise SpecbenchError(f"{folder}: no hydra_mlp.0 weights: not Hydra heads")
    hidden = first.shape[0]
    vocab = state["hydra_lm_head.0.weight"].shape[0] if "hydra_lm_head.0.weight" in state else None
    if not ours and vocab is None:
        raise SpecbenchError(f"{folder}: the published Hydra heads have their own lm_heads (hydra_lm_head.*); "
                             "none are in the file")
    heads = HydraHeads(hidden, n_heads, n_layers, vocab, prefix_config(target) if arch == "prefix-mlp" else None)
    if arch == "prefix-mlp" and heads.prefix is not None:
        state.setdefault("prefix.embed_tokens.weight", heads.prefix.embed_tokens.weight.detach())  # unused
    try:
        heads.load_state_dict(state)
    except RuntimeError as exc:
        raise SpecbenchError(f"{folder}: the Hydra heads' weights do not match its config "
                             f"({str(exc).splitlines()[-1].strip()})") from None
    draft_vocab = config.get("specbench_draft_vocab")
    return heads.eval(), None if draft_vocab is None else torch.tensor(draft_vocab, dtype=torch.long)
