"""Training heads that guess tokens further ahead (Medusa, Hydra): the lm_head rows of the draft vocabulary, and per
head which positions train toward which token."""
from __future__ import annotations

import torch

from specbench.train.training import Batch


def draft_rows(lm_head: torch.Tensor, draft_vocab: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(the frozen lm_head rows of the draft vocabulary in fp32, a map from target token to draft row or -1)."""
    vocab = (draft_vocab if draft_vocab is not None else torch.arange(lm_head.shape[0])).to(lm_head.device)
    to_draft = torch.full((lm_head.shape[0],), -1, dtype=torch.long, device=lm_head.device)
    to_draft[vocab] = torch.arange(len(vocab), device=lm_head.device)
    return lm_head.detach().float()[vocab].contiguous(), to_draft


def ahead(batch: Batch, k: int, to_draft: torch.Tensor) -> tuple[int, torch.Tensor, torch.Tensor] | None:
    """Head k (0-based) at position t guesses the token at t + 2 + k: (span: how many positions t have one, their
    draft-vocabulary targets [B, span], where to train [B, span]: a reply token in the draft vocabulary); None when
    no position qualifies."""
    span = batch.tokens.shape[1] - 2 - k
    if span <= 0:
        return None
    targets = to_draft[batch.tokens[:, 2 + k :]]
    train_at = batch.loss_mask[:, 1 + k : 1 + k + span] & batch.valid[:, 2 + k :] & (targets >= 0)
    return (span, targets, train_at) if train_at.any() else None
