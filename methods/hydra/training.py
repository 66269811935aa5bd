"""Training Hydra heads on cached target features, through the shared fit() (the feature cache EAGLE and Medusa use).

Head k at position t reads [h_t, e(x_{t+1}) .. e(x_{t+k+1})] (the target's embeddings, frozen) and is trained toward
x_{t+k+2}: by default against the target's own distribution there (Hydra++'s teacher distillation: the softmax of
the target's logits at position t+k+1, over the draft vocabulary), with `teacher=0` against the data's token.
Heads are weighted 0.8^k, as Medusa's."""
from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

from specbench.decode.target import LoadedModel
from specbench.methods.common.ahead import ahead, draft_rows
from specbench.methods.hydra.checkpoint import save_heads
from specbench.methods.hydra.head import HydraHeads
from specbench.train.features import FeatureCache, draft_vocabulary
from specbench.train.training import Batch, TrainConfig, fit


class HydraTrainable:
    def __init__(self, heads: HydraHeads, embed: torch.nn.Module, lm_head: torch.Tensor,
                 draft_vocab: torch.Tensor | None, teacher: bool = True) -> None:
        self.module = heads
        self.embed = embed
        self.teacher = teacher
        self.draft_vocab = draft_vocab
        self.lm_head, self.to_draft = draft_rows(lm_head, draft_vocab)

    def loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        with torch.no_grad():
            embeds = self.embed(batch.tokens).float()  # [B, n, H]
        total = torch.zeros((), device=batch.hidden.device)
        metrics: dict[str, float] = {}
        for k in range(len(self.module)):
            where = ahead(batch, k, self.to_draft)
            if where is None:
                continue
            span, targets, train_at = where
            inputs = torch.cat([batch.hidden[:, :span]] + [embeds[:, 1 + j : 1 + j + span] for j in range(k + 1)], -1)
            logits = self.module(k, inputs[train_at]) @ self.lm_head.T
            if self.teacher:
                with torch.no_grad():
                    soft = (batch.hidden[:, 1 + k : 1 + k + span][train_at] @ self.lm_head.T).softmax(-1)
                loss = -(soft * logits.log_softmax(-1)).sum(-1).mean()
            else:
                loss = F.cross_entropy(logits, targets[train_at])
            total = total + 0.8**k * loss
            metrics[f"top1_head{k + 1}"] = float((logits.argmax(-1) == targets[train_at]).float().mean())
        return total, metrics

    def save(self, folder: Path) -> None:
        save_heads(self.module, folder, self.draft_vocab, self.teacher)


def train(target: LoadedModel, cache: FeatureCache, cfg: TrainConfig, options: dict[str, str]) -> dict[str, float]:
    """Train Hydra heads (options: heads=4, layers=1 (Hydra++ uses 4), teacher=1, draft_vocab=8192) on a feature cache."""
    model = target.model
    heads = HydraHeads(model.config.hidden_size, int(options.get("heads", 4)), int(options.get("layers", 1)))
    lm_head = model.get_output_embeddings().weight
    heads.to(lm_head.device)  # trained in fp32 on the target's device
    draft_vocab = draft_vocabulary(cache, cfg.out, int(options.get("draft_vocab", 8192)), target.stop_ids)
    trainable = HydraTrainable(heads, model.get_input_embeddings(), lm_head, draft_vocab,
                               options.get("teacher", "1") not in ("0", "false", "no"))
    return fit(trainable, cache, cfg)
