"""What an EAGLE head is trained with: EAGLE's loss, or HASS's (Zhang et al., "Learning Harmonized Representations
for Speculative Sampling", ICLR 2025), which changes EAGLE's training only, never its drafting.

HASS adds two things to EAGLE's loss (SmoothL1 on the next feature + 0.1 x cross-entropy against the target):
- harmonized objective distillation: a top-K term, -sum over the target's K most probable tokens of
  p_target(x) log q_draft(x) (K=10, weight 1), which spends the head's capacity on the tokens a draft tree can use;
- harmonized context alignment: each batch runs `steps` forwards of the head (3: the plain one and two alignment
  steps). Step s at position i reads the head's own step s-1 prediction of feature i (shifted by one position, not
  the target's feature), with the true token i+1, and attends as decoding s levels below the root i-s does: the
  target's features up to i-s (the keys of step 0) and, for each earlier alignment step k <= s, that step's single
  key at i-s+k (the node's ancestors). Every step predicts feature i+1 and its loss is added, weight 1 each.

An objective is recorded in the head's config.json ("specbench_objective": its name and settings), so every
report that loads the head can say what it was trained with.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from specbench.errors import SpecbenchError
from specbench.method import OBJECTIVE_KEY, Option
from specbench.methods.eagle import OBJECTIVES  # declared with the method (torch-free)

__all__ = ["HASS_OPTIONS", "OBJECTIVES", "OBJECTIVE_KEY", "Objective", "alignment_mask", "objective_from",
           "top_k_distillation"]

HASS_OPTIONS = (
    Option("steps", 3, "forwards per batch: the plain one, then steps-1 alignment steps on the head's own features",
           int, low=1),
    Option("top_k", 10, "the target's top-K tokens of the distillation term", int, low=1),
    Option("top_k_weight", 1.0, "weight of the top-K distillation term", float, low=0),
)


@dataclass(frozen=True)
class Objective:
    """EAGLE's objective is one step without the top-K term; HASS's the same loss at every step plus the term."""

    name: str = "eagle"
    steps: int = 1
    top_k: int = 0
    top_k_weight: float = 0.0

    def record(self) -> dict[str, str | int | float]:
        """What config.json keeps: the name, and HASS's settings when they apply."""
        return asdict(self) if self.name == "hass" else {"name": self.name}


def objective_from(options: dict[str, str]) -> Objective:
    """The objective that `train eagle` options ask for (objective=eagle|hass and HASS's own options)."""
    name = options.get("objective", "eagle")
    if name not in OBJECTIVES:
        raise SpecbenchError(f"unknown EAGLE training objective {name!r}; valid: {', '.join(OBJECTIVES)}")
    given = [option.name for option in HASS_OPTIONS if option.name in options]
    if name == "eagle":
        if given:
            raise SpecbenchError(f"--opt {', '.join(given)}: HASS's settings go with --objective hass")
        return Objective()
    where = "train eagle --objective hass"
    values = {o.name: o.parse(options.get(o.name, o.default), where) for o in HASS_OPTIONS}
    return Objective("hass", **values)


def alignment_mask(valid: torch.Tensor, step: int) -> torch.Tensor:
    """Which keys step `step` attends to, [B, n, (step+1) n] bool, over the keys of steps 0..step side by side (the
    head's cache after this step). Query i sees step 0's keys 0..i-step that are not padding and, for each
    alignment step k in 1..step, step k's key at i-step+k. A query with no context (i < step, or padding) sees its
    own key only, so that no row is empty; its loss is not counted."""
    b, n = valid.shape
    rows = torch.arange(n, device=valid.device)[:, None]
    cols = torch.arange(n, device=valid.device)[None, :]
    blocks = [(cols <= rows - step)[None] & valid[:, None, :]]
    blocks += [(cols == rows - step + k)[None].expand(b, n, n) for k in range(1, step + 1)]
    allowed = torch.cat(blocks, dim=-1)
    allowed[:, :, step * n :] |= torch.eye(n, dtype=torch.bool, device=valid.device)
    return allowed


def top_k_distillation(target_p: torch.Tensor, draft_logp: torch.Tensor, k: int) -> torch.Tensor:
    """HASS's harmonized objective distillation: the mean over rows of -sum_{x in top-k(target_p)} target_p(x)
    log q(x) ([rows, V] each; k above V means every token, i.e. the full cross-entropy)."""
    top = target_p.topk(min(k, target_p.shape[-1]), dim=-1)
    return -(top.values * draft_logp.gather(-1, top.indices)).sum(-1).mean()
