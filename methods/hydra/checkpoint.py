"""Hydra heads on disk: config.json (the official hydra_num_heads / hydra_num_layers / grounded_heads, plus our
draft vocabulary and shared_lm_head) and model.safetensors with the official `hydra_mlp.*` keys. The official code
also expects a `hydra_lm_head.{k}` per head (a copy of the full lm_head each); ours share the target's, so an
official checkpoint loads here without them and ours loads there only with the target's lm_head copied in."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from specbench.errors import SpecbenchError
from specbench.methods.hydra.head import HydraHeads


def save_heads(heads: HydraHeads, folder: Path, draft_vocab: torch.Tensor | None, teacher: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    config = {"hydra_num_heads": len(heads), "hydra_num_layers": heads.n_layers, "hydra_head_arch": "mlp",
              "grounded_heads": True, "hidden_size": heads.hidden, "shared_lm_head": True,
              "specbench_teacher_distillation": teacher}
    if draft_vocab is not None:
        config["specbench_draft_vocab"] = [int(t) for t in draft_vocab]
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    state = {f"hydra_mlp.{k}": v for k, v in heads.hydra_mlp.state_dict().items()}
    save_file({k: v.detach().to("cpu", torch.float16).contiguous() for k, v in state.items()},
              str(folder / "model.safetensors"))


def load_heads(folder: Path) -> tuple[HydraHeads, torch.Tensor | None]:
    config_path, weights = folder / "config.json", folder / "model.safetensors"
    if not config_path.is_file() or not weights.is_file():
        raise SpecbenchError(f"{folder} is not a Hydra head folder (config.json + model.safetensors)")
    config = json.loads(config_path.read_text())
    sizes = [config.get(k) for k in ("hidden_size", "hydra_num_heads", "hydra_num_layers")]
    if not all(isinstance(s, int) and s > 0 for s in sizes) or not config.get("grounded_heads"):
        raise SpecbenchError(f"{folder} is not a Hydra head folder (its config.json lacks hidden_size, "
                             "hydra_num_heads, hydra_num_layers or grounded_heads)")
    heads = HydraHeads(*sizes)
    state = {k.removeprefix("hydra_mlp."): v.float() for k, v in load_file(str(weights)).items()
             if k.startswith("hydra_mlp.")}
    try:
        heads.hydra_mlp.load_state_dict(state)
    except RuntimeError as exc:
        raise SpecbenchError(f"{folder}: weights do not match its config ({str(exc).splitlines()[-1].strip()})") from None
    vocab = config.get("specbench_draft_vocab")
    return heads.eval(), None if vocab is None else torch.tensor(vocab, dtype=torch.long)
