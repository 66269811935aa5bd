"""Medusa heads on disk, in every layout that has been published, and ours.

- Ours (`train medusa`): config.json (medusa_num_heads, hidden_size, shared_lm_head, our draft vocabulary) and
  model.safetensors with {k}.0.linear.weight/bias: heads that share the target's lm_head.
- Medusa-1 as FasterDecoding publishes it: config.json (base_model_name_or_path, medusa_num_heads,
  medusa_num_layers; no hidden_size) and medusa_lm_head.pt (or .safetensors) with {k}.0.linear.weight/bias and
  {k}.1.weight, each head's own lm_head. The uploaded configs can under-report the heads (2 where the file holds
  5; the reference forces 5), so the heads are counted from the weights.
- Medusa-2: a full model (config.json with model_type; model.safetensors, possibly sharded) whose medusa_head.*
  keys are the heads, in the Medusa-1 key layout.
A file with {k}.0 keys only (Medusa's later trainer, config version "2") is heads sharing the target's lm_head.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from specbench.errors import SpecbenchError
from specbench.methods.medusa.head import MedusaHeads

HEAD_FILES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")
KEY = re.compile(r"^(\d+)\.(\d+)\.(linear\.weight|linear\.bias|weight)$")


def save_heads(heads: MedusaHeads, folder: Path, draft_vocab: torch.Tensor | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    hidden = heads.heads[0][0].linear.weight.shape[0]
    config = {"medusa_num_heads": len(heads.heads), "medusa_num_layers": 1, "hidden_size": hidden,
              "shared_lm_head": not heads.own_lm_heads}
    if draft_vocab is not None:
        config["specbench_draft_vocab"] = [int(t) for t in draft_vocab]
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    state = {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in heads.heads.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"))


def _medusa2_heads(folder: Path) -> dict[str, torch.Tensor]:
    """The medusa_head.* tensors of a full-model checkpoint (one file or shards), read without the rest."""
    index = folder / "model.safetensors.index.json"
    files = sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()}) if index.is_file() \
        else [folder / "model.safetensors"]
    state = {}
    for file in files:
        with safe_open(str(file), "pt") as f:
            state.update({k.removeprefix("medusa_head."): f.get_tensor(k) for k in f.keys()
                          if k.startswith("medusa_head.")})
    return state


def _published_state(folder: Path, config: dict) -> dict[str, torch.Tensor]:
    for name in HEAD_FILES:
        if (folder / name).is_file():
            path = folder / name
            if path.suffix == ".pt":
                return torch.load(path, map_location="cpu", weights_only=True)
            return load_file(str(path))
    if "model_type" in config and ((folder / "model.safetensors").is_file()
                                   or (folder / "model.safetensors.index.json").is_file()):
        state = _medusa2_heads(folder)
        if state:
            return state
    raise SpecbenchError(f"{folder} is not a Medusa head folder: no model.safetensors with our heads, no "
                         f"{' or '.join(HEAD_FILES)} (Medusa-1), no medusa_head.* weights (Medusa-2)")


def _published_heads(folder: Path, config: dict) -> MedusaHeads:
    state = {k: v.float() for k, v in _published_state(folder, config).items()}
    bad = [k for k in state if not KEY.match(k)]
    if bad:
        raise SpecbenchError(f"{folder}: {bad[0]} is not a Medusa head weight ({{k}}.0.linear.weight/bias, {{k}}.1.weight)")
    layers = int(config.get("medusa_num_layers", 1))
    if layers != 1:
        raise SpecbenchError(f"{folder}: medusa_num_layers={layers}; the published heads have one residual block "
                             "(the reference repeats ONE block for more, sharing its weights): not read here")
    count = 1 + max(int(KEY.match(k).group(1)) for k in state)
    hidden = state["0.0.linear.weight"].shape[0]
    own = "0.1.weight" in state
    heads = MedusaHeads(hidden, count, state["0.1.weight"].shape[0] if own else None)
    try:
        heads.heads.load_state_dict(state)
    except RuntimeError as exc:
        raise SpecbenchError(f"{folder}: the Medusa heads' weights are incomplete or misshapen "
                             f"({str(exc).splitlines()[-1].strip()})") from None
    return heads


def load_heads(folder: Path) -> tuple[MedusaHeads, torch.Tensor | None]:
    """The heads (own lm_heads or shared, as the file has them) and our draft vocabulary (None: the full one)."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise SpecbenchError(f"{folder} is not a Medusa head folder (no config.json)")
    config = json.loads(config_path.read_text())
    if not isinstance(config.get("medusa_num_heads"), int):
        raise SpecbenchError(f"{folder} is not a Medusa head folder (its config.json lacks medusa_num_heads)")
    if not config.get("shared_lm_head") or not (folder / "model.safetensors").is_file() or "model_type" in config:
        return _published_heads(folder, config).eval(), None
    heads = MedusaHeads(config["hidden_size"], config["medusa_num_heads"])
    try:
        heads.heads.load_state_dict({k: v.float() for k, v in load_file(str(folder / "model.safetensors")).items()})
    except RuntimeError as exc:
        raise SpecbenchError(f"{folder}: weights do not match its config ({str(exc).splitlines()[-1].strip()})") from None
    vocab = config.get("specbench_draft_vocab")
    return heads.eval(), None if vocab is None else torch.tensor(vocab, dtype=torch.long)
