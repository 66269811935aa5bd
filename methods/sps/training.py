"""Training the small draft LM by distillation from cached target features, through the shared fit()."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaForCausalLM

from specbench.decode.target import LoadedModel
from specbench.methods.common.small_draft import save_small_draft, small_draft
from specbench.train.features import FeatureCache, draft_vocabulary
from specbench.train.training import Batch, TrainConfig, fit


class SmallDraftTrainable:
    """Distillation: cross-entropy of the draft against the target's next-token distribution (from the cached
    features), over the draft vocabulary, on reply positions."""

    def __init__(self, draft: LlamaForCausalLM, draft_vocab: torch.Tensor) -> None:
        self.module = draft
        self.draft_vocab = draft_vocab
        weight = draft.lm_head.weight.detach().float()
        self.lm_head = weight if draft_vocab is None else weight[draft_vocab.to(weight.device)].contiguous()

    def loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        hidden = self.module.model(input_ids=batch.tokens, attention_mask=batch.valid.long()).last_hidden_state
        train_at = batch.loss_mask & batch.valid
        draft_logits = hidden[train_at] @ self.lm_head.T
        target_logits = batch.hidden[train_at] @ self.lm_head.T
        loss = -(target_logits.softmax(-1) * draft_logits.log_softmax(-1)).sum(-1).mean()
        top1 = (draft_logits.argmax(-1) == target_logits.argmax(-1)).float().mean()
        return loss, {"kd_loss": float(loss.detach()), "top1": float(top1)}

    def save(self, folder: Path) -> None:
        save_small_draft(self.module, folder, self.draft_vocab)


def train(target: LoadedModel, cache: FeatureCache, cfg: TrainConfig, options: dict[str, str]) -> dict[str, float]:
    """Train a small draft LM for sps (options: layers=2, draft_vocab=8192) by distillation from cached features."""
    draft = small_draft(target.model, int(options.get("layers", 2)))
    draft.to(target.model.device)  # trained on the target's device (its embedding and lm_head are the target's)
    draft_vocab = draft_vocabulary(cache, cfg.out, int(options.get("draft_vocab", 8192)), target.stop_ids)
    return fit(SmallDraftTrainable(draft, draft_vocab), cache, cfg)
