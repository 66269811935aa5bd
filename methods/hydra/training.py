"""Training Hydra heads on cached target features, through the shared fit() (the feature cache EAGLE and Medusa use).

Head k at position t reads [h_t, e(x_{t+1}) .. e(x_{t+k+1})] (the target's embeddings, frozen) and is trained toward
x_{t+k+2}: by default against the target's own distribution there (Hydra++'s teacher distillation: the softmax of
the target's logits at position t+k+1, over the draft vocabulary), with `teacher=0` against the data's token.
Heads are weighted 0.8^k, as Medusa's.

`arch=prefix-mlp` trains Hydra++ as published: the context vector h_t is the prefix layer's output (one decoder
layer over the target's hidden states, causal, trained with the heads), 4-block heads by default, each head its own
lm_head with bias over the draft vocabulary (initialised from the target's rows, trained); `arch=mlp` (the default)
trains the variant that shares the target's frozen lm_head."""
from __future__ import annotations

from pathlib import Path

import torch
from torch.nn import functional as F

from specbench.decode.target import LoadedModel
from specbench.errors import SpecbenchError
from specbench.methods.common.ahead import ahead, draft_rows
from specbench.methods.hydra.checkpoint import save_heads
from specbench.methods.hydra.head import ARCHS, HydraHeads, prefix_config
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
        context = self.context(batch.hidden.float())
        total = torch.zeros((), device=batch.hidden.device)
        metrics: dict[str, float] = {}
        for k in range(len(self.module)):
            where = ahead(batch, k, self.to_draft)
            if where is None:
                continue
            span, targets, train_at = where
            inputs = torch.cat([context[:, :span]] + [embeds[:, 1 + j : 1 + j + span] for j in range(k + 1)], -1)
            out = self.module(k, inputs[train_at])
            own = self.module.hydra_lm_head
            logits = out @ self.lm_head.T if own is None else own[k](out)
            if self.teacher:
                with torch.no_grad():
                    soft = (batch.hidden[:, 1 + k : 1 + k + span][train_at] @ self.lm_head.T).softmax(-1)
                loss = -(soft * logits.log_softmax(-1)).sum(-1).mean()
            else:
                loss = F.cross_entropy(logits, targets[train_at])
            total = total + 0.8**k * loss
            metrics[f"top1_head{k + 1}"] = float((logits.argmax(-1) == targets[train_at]).float().mean())
        return total, metrics

    def context(self, hidden: torch.Tensor) -> torch.Tensor:
        """The context vector at every position [B, n, H]: the target's hidden state, or (prefix-mlp) the prefix
        layer's output over the hidden states before it, at positions 0..n-1 as the drafter runs it."""
        if self.module.prefix is None:
            return hidden
        positions = torch.arange(hidden.shape[1], device=hidden.device)[None].expand(hidden.shape[0], -1)
        return self.module.prefix(inputs_embeds=hidden, position_ids=positions).last_hidden_state

    def save(self, folder: Path) -> None:
        save_heads(self.module, folder, self.draft_vocab, self.teacher)


def train(target: LoadedModel, cache: FeatureCache, cfg: TrainConfig, options: dict[str, str]) -> dict[str, float]:
    """Train Hydra heads (options: arch=mlp|prefix-mlp, heads=4, layers=1 (prefix-mlp: 4, as Hydra++), teacher=1,
    draft_vocab=8192) on a feature cache."""
    model = target.model
    arch = options.get("arch", "mlp")
    if arch not in ARCHS:
        raise SpecbenchError(f"train hydra: arch={arch} is not one of {', '.join(ARCHS)}")
    lm_head = model.get_output_embeddings().weight
    draft_vocab = draft_vocabulary(cache, cfg.out, int(options.get("draft_vocab", 8192)), target.stop_ids)
    heads = hydra_heads(model.config, arch, int(options.get("heads", 4)),
                        int(options.get("layers", 4 if arch == "prefix-mlp" else 1)), lm_head, draft_vocab)
    heads.to(lm_head.device)  # trained in fp32 on the target's device
    trainable = HydraTrainable(heads, model.get_input_embeddings(), lm_head, draft_vocab,
                               options.get("teacher", "1") not in ("0", "false", "no"))
    return fit(trainable, cache, cfg)


def hydra_heads(config, arch: str, n_heads: int, n_layers: int, lm_head: torch.Tensor,
                draft_vocab: torch.Tensor | None) -> HydraHeads:
    """New heads of an architecture: `mlp` on the target's lm_head; `prefix-mlp` with the prefix layer and own
    lm_heads over the draft vocabulary, each starting as the target's rows with a zero bias."""
    if arch == "mlp":
        return HydraHeads(config.hidden_size, n_heads, n_layers)
    rows = lm_head.detach()[draft_vocab] if draft_vocab is not None else lm_head.detach()
    heads = HydraHeads(config.hidden_size, n_heads, n_layers, rows.shape[0], prefix_config(config))
    heads.prefix.embed_tokens.weight.requires_grad_(False)  # never read: the prefix layer takes hidden states
    with torch.no_grad():
        for own in heads.hydra_lm_head:
            own.weight.copy_(rows.float())
            own.bias.zero_()
    return heads
