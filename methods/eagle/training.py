"""Training an EAGLE head: the paper's loss on cached target features, through the shared fit()."""
from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

from specbench.decode.target import LoadedModel
from specbench.errors import SpecbenchError
from specbench.methods.common.official import target_embedding
from specbench.methods.eagle.checkpoint import load_head, save_head
from specbench.methods.eagle.head import INPUTS, EagleHead, head_config
from specbench.train.features import FeatureCache, draft_vocabulary
from specbench.train.training import Batch, TrainConfig, fit


class EagleTrainable:
    """Loss of the paper: SmoothL1 on the next feature + 0.1 x cross-entropy against the target's distribution,
    uniform noise on input features; positions whose next token is a reply token only."""

    def __init__(self, head: EagleHead, lm_head: torch.Tensor, draft_vocab: torch.Tensor | None, noise: float = 0.1):
        self.module = head
        self.head = head
        self.lm_head_full = lm_head.detach().float()
        self.draft_vocab = draft_vocab
        self.lm_head = (self.lm_head_full if draft_vocab is None
                        else self.lm_head_full[draft_vocab.to(lm_head.device)].contiguous())
        self.noise = noise

    def loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        n = batch.tokens.shape[1] - 1
        shift = self.head.shift
        features = batch.hidden[:, :-1]
        if self.head.training and self.noise > 0:
            features = features + (torch.rand_like(features) * 2 - 1) * self.noise
        tokens = batch.tokens[:, shift : n + shift]
        valid = batch.valid[:, :n]
        device = features.device
        allowed = torch.ones(n, n, dtype=torch.bool, device=device).tril() & valid[:, None, :]  # [B, n, n]
        allowed |= torch.eye(n, dtype=torch.bool, device=device)  # padding rows see themselves: no row without any key
        mask = torch.zeros(allowed.shape, device=device).masked_fill(~allowed, torch.finfo(torch.float32).min)[:, None]
        positions = torch.arange(n, device=device).expand(len(tokens), n)
        predicted = self.head(tokens, features, positions, mask)
        train_at = batch.loss_mask[:, :n] & batch.valid[:, 1:]
        predicted, target = predicted[train_at], batch.hidden[:, 1:][train_at]
        feature_loss = F.smooth_l1_loss(predicted.float(), target, reduction="none").mean(-1).mean()
        with torch.autocast(device.type, enabled=False):  # under mixed precision the target's side stays fp32
            target_logits = target @ self.lm_head.T
        draft_logits = (predicted @ self.lm_head.T).float()
        target_p = target_logits.softmax(-1)
        token_loss = -(target_p * draft_logits.log_softmax(-1)).sum(-1).mean()
        metrics = {
            "feature_loss": float(feature_loss.detach()),
            "token_loss": float(token_loss.detach()),
            "top1": float((draft_logits.argmax(-1) == target_logits.argmax(-1)).float().mean()),
        }
        if not self.head.training and self.draft_vocab is not None:
            full_target = (target @ self.lm_head_full.T).argmax(-1)
            full_draft = (predicted @ self.lm_head_full.T).argmax(-1)
            metrics["top1_full_vocab"] = float((full_draft == full_target).float().mean())
        return feature_loss + 0.1 * token_loss, metrics

    def save(self, folder: Path) -> None:
        save_head(self.head, folder, self.draft_vocab)


def train(target: LoadedModel, cache: FeatureCache, cfg: TrainConfig, options: dict[str, str]) -> dict[str, float]:
    """Train an EAGLE head (options: inputs=shifted|unshifted|feature|token, draft_vocab=8192, noise=0.1,
    init=HEAD_FOLDER to fine-tune an existing head, e.g. on self-distilled data; it keeps that head's inputs and
    draft vocabulary)."""
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
    trainable = EagleTrainable(head, lm_head, draft_vocab, float(options.get("noise", 0.1)))
    return fit(trainable, cache, cfg)
