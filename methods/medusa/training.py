"""Training Medusa heads on cached target features, through the shared fit()."""
from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

from specbench.decode.target import LoadedModel
from specbench.methods.medusa.checkpoint import save_heads
from specbench.methods.medusa.head import MedusaHeads
from specbench.train.features import FeatureCache, draft_vocabulary
from specbench.train.training import Batch, TrainConfig, fit


class MedusaTrainable:
    """Cross-entropy of head k against the data's token k+1 places ahead of the next one, weighted 0.8^k, over the
    draft vocabulary (targets outside it are skipped)."""

    def __init__(self, heads: MedusaHeads, lm_head: torch.Tensor, draft_vocab: torch.Tensor | None) -> None:
        self.module = heads
        vocab = draft_vocab if draft_vocab is not None else torch.arange(lm_head.shape[0])
        self.draft_vocab = draft_vocab
        vocab = vocab.to(lm_head.device)
        self.lm_head = lm_head.detach().float()[vocab].contiguous()
        self.to_draft = torch.full((lm_head.shape[0],), -1, dtype=torch.long, device=lm_head.device)
        self.to_draft[vocab] = torch.arange(len(vocab), device=lm_head.device)

    def loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        n = batch.tokens.shape[1]
        total = torch.zeros((), device=batch.hidden.device)
        metrics: dict[str, float] = {}
        for k, head in enumerate(self.module.heads):
            span = n - 2 - k  # positions t with a target token at t + 2 + k
            if span <= 0:
                break
            targets = self.to_draft[batch.tokens[:, 2 + k :]]
            train_at = batch.loss_mask[:, 1 + k : 1 + k + span] & batch.valid[:, 2 + k :] & (targets >= 0)
            if not train_at.any():
                continue
            logits = head(batch.hidden[:, :span][train_at]) @ self.lm_head.T
            loss = F.cross_entropy(logits, targets[train_at])
            total = total + 0.8**k * loss
            metrics[f"top1_head{k + 1}"] = float((logits.argmax(-1) == targets[train_at]).float().mean())
        return total, metrics

    def save(self, folder: Path) -> None:
        save_heads(self.module, folder, self.draft_vocab)

def train(target: LoadedModel, cache: FeatureCache, cfg: TrainConfig, options: dict[str, str]) -> dict[str, float]:
    """Train Medusa heads (options: heads=4, draft_vocab=8192) on a feature cache (the EAGLE one is reused)."""
    model = target.model
    heads = MedusaHeads(model.config.hidden_size, int(options.get("heads", 4)))
    heads.to(model.get_output_embeddings().weight.device)  # trained in fp32 on the target's device
    draft_vocab = draft_vocabulary(cache, cfg.out, int(options.get("draft_vocab", 8192)), target.stop_ids)
    return fit(MedusaTrainable(heads, model.get_output_embeddings().weight, draft_vocab), cache, cfg)
