"""Training Medusa heads on cached target features, through the shared fit()."""
from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

from specbench.decode.target import LoadedModel
from specbench.methods.common.ahead import ahead, draft_rows
from specbench.methods.medusa.checkpoint import save_heads
from specbench.methods.medusa.head import MedusaHeads
from specbench.train.features import FeatureCache, draft_vocabulary
from specbench.train.training import Batch, TrainConfig, fit


class MedusaTrainable:
    """Cross-entropy of head k against the data's token k+1 places ahead of the next one, weighted 0.8^k, over the
    draft vocabulary (targets outside it are skipped)."""

    def __init__(self, heads: MedusaHeads, lm_head: torch.Tensor, draft_vocab: torch.Tensor | None) -> None:
        self.module = heads
        self.draft_vocab = draft_vocab
        self.lm_head, self.to_draft = draft_rows(lm_head, draft_vocab)

    def loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        total = torch.zeros((), device=batch.hidden.device)
        metrics: dict[str, float] = {}
        for k, head in enumerate(self.module.heads):
            where = ahead(batch, k, self.to_draft)
            if where is None:
                continue
            span, targets, train_at = where
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
