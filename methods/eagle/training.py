"""Training an EAGLE head: the paper's loss on cached target features, through the shared fit()."""
from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F
from transformers import DynamicCache

from specbench.decode.target import LoadedModel
from specbench.errors import SpecbenchError
from specbench.methods.common.official import target_embedding
from specbench.methods.eagle.checkpoint import load_head, save_head
from specbench.methods.eagle.head import INPUTS, EagleHead, head_config
from specbench.methods.eagle.objective import (
    OBJECTIVE_KEY,
    Objective,
    alignment_mask,
    objective_from,
    top_k_distillation,
)
from specbench.train.features import FeatureCache, draft_vocabulary
from specbench.train.training import Batch, TrainConfig, fit


def aligned_predictions(head: EagleHead, tokens: torch.Tensor, features: torch.Tensor, valid: torch.Tensor,
                        steps: int) -> list[torch.Tensor]:
    """The head's predicted features [B, n, H] at each step (methods/eagle/objective.py): step 0 is EAGLE's forward
    over the target's features; step s reads step s-1's predictions shifted by one position (detached, as HASS
    does) and attends through the head's cache, which then holds the keys of steps 0..s, as it does while drafting."""
    b, n = tokens.shape
    positions = torch.arange(n, device=features.device).expand(b, n)
    cache = DynamicCache(config=head.config) if steps > 1 else None
    inputs, out = features, []
    for step in range(steps):
        allowed = alignment_mask(valid, step)
        mask = torch.zeros(allowed.shape, device=features.device).masked_fill(~allowed, torch.finfo(torch.float32).min)
        out.append(head(tokens, inputs, positions, mask[:, None], cache))
        inputs = torch.cat([features[:, :1], out[-1][:, :-1].detach().to(features.dtype)], dim=1)
    return out


class EagleTrainable:
    """Loss of the paper: SmoothL1 on the next feature + 0.1 x cross-entropy against the target's distribution,
    uniform noise on input features; positions whose next token is a reply token only. HASS's objective adds its
    top-K distillation term and sums the loss over its alignment steps (methods/eagle/objective.py)."""

    def __init__(self, head: EagleHead, lm_head: torch.Tensor, draft_vocab: torch.Tensor | None, noise: float = 0.1,
                 objective: Objective | None = None):
        objective = objective or Objective()
        if objective.steps > 1 and head.shift != 1:
            raise SpecbenchError("HASS's alignment steps need the head that reads the shifted token (inputs=shifted)")
        self.module = head
        self.head = head
        self.lm_head_full = lm_head.detach().float()
        self.draft_vocab = draft_vocab
        self.lm_head = (self.lm_head_full if draft_vocab is None
                        else self.lm_head_full[draft_vocab.to(lm_head.device)].contiguous())
        self.noise = noise
        self.objective = objective

    def loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        n = batch.tokens.shape[1] - 1
        shift = self.head.shift
        features = batch.hidden[:, :-1]
        if self.head.training and self.noise > 0:
            features = features + (torch.rand_like(features) * 2 - 1) * self.noise
        tokens = batch.tokens[:, shift : n + shift]
        train_at = batch.loss_mask[:, :n] & batch.valid[:, 1:]
        target = batch.hidden[:, 1:][train_at]
        with torch.autocast(features.device.type, enabled=False):  # under mixed precision the target's side stays fp32
            target_logits = target @ self.lm_head.T
        target_p = target_logits.softmax(-1)
        column = torch.arange(n, device=features.device).expand_as(train_at)[train_at]
        steps = aligned_predictions(self.head, tokens, features, batch.valid[:, :n], self.objective.steps)
        total = torch.zeros((), device=features.device)
        metrics: dict[str, float] = {}
        for step, predicted in enumerate(steps):
            keep = column >= step  # step s predicts from the target's features up to s positions back
            if not keep.any():
                break
            loss, step_metrics = self._step_loss(predicted[train_at][keep], target[keep], target_logits[keep],
                                                 target_p[keep])
            total = total + loss
            metrics.update(step_metrics if step == 0 else {f"top1_depth{step + 1}": step_metrics["top1"]})
        return total, metrics

    def _step_loss(self, predicted: torch.Tensor, target: torch.Tensor, target_logits: torch.Tensor,
                   target_p: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """One step's loss over its trained positions: EAGLE's, plus HASS's top-K term when the objective has it."""
        feature_loss = F.smooth_l1_loss(predicted.float(), target, reduction="none").mean(-1).mean()
        draft_logits = (predicted @ self.lm_head.T).float()
        draft_logp = draft_logits.log_softmax(-1)
        token_loss = -(target_p * draft_logp).sum(-1).mean()
        loss = feature_loss + 0.1 * token_loss
        metrics = {
            "feature_loss": float(feature_loss.detach()),
            "token_loss": float(token_loss.detach()),
            "top1": float((draft_logits.argmax(-1) == target_logits.argmax(-1)).float().mean()),
        }
        if self.objective.top_k_weight > 0:
            top_k_loss = top_k_distillation(target_p, draft_logp, self.objective.top_k)
            loss = loss + self.objective.top_k_weight * top_k_loss
            metrics["top_k_loss"] = float(top_k_loss.detach())
        if not self.head.training and self.draft_vocab is not None:
            full_target = (target @ self.lm_head_full.T).argmax(-1)
            full_draft = (predicted @ self.lm_head_full.T).argmax(-1)
            metrics["top1_full_vocab"] = float((full_draft == full_target).float().mean())
        return loss, metrics

    def save(self, folder: Path) -> None:
        save_head(self.head, folder, self.draft_vocab)


def train(target: LoadedModel, cache: FeatureCache, cfg: TrainConfig, options: dict[str, str]) -> dict[str, float]:
    """Train an EAGLE head (options: inputs=shifted|unshifted|feature|token, draft_vocab=8192, noise=0.1,
    init=HEAD_FOLDER to fine-tune an existing head, e.g. on self-distilled data; it keeps that head's inputs and
    draft vocabulary; objective=eagle|hass, and with hass steps=3, top_k=10, top_k_weight=1.0)."""
    objective = objective_from(options)
    model = target.model
    embedding = target_embedding(model).float()
    if "init" in options:
        head, draft_vocab = load_head(Path(options["init"]), embedding)
        if "inputs" in options and options["inputs"] != head.config.specbench_inputs:
            raise SpecbenchError(f"init head {options['init']} reads {head.config.specbench_inputs!r}, not {options['inputs']!r}")
    else:
        inputs = options.get("inputs", "shifted")
        if inputs not in INPUTS:
            raise SpecbenchError(f"unknown EAGLE head inputs {inputs!r}; valid: {', '.join(INPUTS)}")
        head = EagleHead(head_config(model.config, inputs))
        head.embed_tokens.weight.data.copy_(embedding)
        draft_vocab = draft_vocabulary(cache, cfg.out, int(options.get("draft_vocab", 8192)), target.stop_ids)
    lm_head = model.get_output_embeddings().weight
    head.to(lm_head.device)  # trained in fp32 on the target's device
    setattr(head.config, OBJECTIVE_KEY, objective.record())  # config.json says what the head was trained with
    trainable = EagleTrainable(head, lm_head, draft_vocab, float(options.get("noise", 0.1)), objective)
    return fit(trainable, cache, cfg)
