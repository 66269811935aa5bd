"""Medusa heads on disk: config.json (medusa_num_heads, hidden_size, our draft vocabulary) and model.safetensors."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from specbench.errors import SpecbenchError
from specbench.methods.medusa.head import MedusaHeads


def save_heads(heads: MedusaHeads, folder: Path, draft_vocab: torch.Tensor | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    hidden = heads.heads[0][0].linear.weight.shape[0]
    config = {"medusa_num_heads": len(heads.heads), "medusa_num_layers": 1, "hidden_size": hidden,
              "shared_lm_head": True}
    if draft_vocab is not None:
        config["specbench_draft_vocab"] = [int(t) for t in draft_vocab]
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    state = {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in heads.heads.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"))


def load_heads(folder: Path) -> tuple[MedusaHeads, torch.Tensor | None]:
    config_path, weights = folder / "config.json", folder / "model.safetensors"
    if not config_path.is_file() or not weights.is_file():
        raise SpecbenchError(f"{folder} is not a Medusa head folder (config.json + model.safetensors)")
    config = json.loads(config_path.read_text())
    if not isinstance(config.get("hidden_size"), int) or not isinstance(config.get("medusa_num_heads"), int):
        raise SpecbenchError(f"{folder} is not a Medusa head folder (its config.json lacks medusa_num_heads)")
    heads = MedusaHeads(config["hidden_size"], config["medusa_num_heads"])
    try:
        heads.heads.load_state_dict({k: v.float() for k, v in load_file(str(weights)).items()})
    except RuntimeError as exc:
        raise SpecbenchError(f"{folder}: weights do not match its config ({str(exc).splitlines()[-1].strip()})") from None
    vocab = config.get("specbench_draft_vocab")
    return heads.eval(), None if vocab is None else torch.tensor(vocab, dtype=torch.long)
