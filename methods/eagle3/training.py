"""`python -m specbench train eagle3`: the training-time test (EAGLE-3, as the official trainer does it).

The head is unrolled `steps` times (default 7) over every position at once. Step 0 reads the fused target
features; step j reads the head's own step j-1 output at the same position, the token j places further on, and sits
at position t + j, as a draft node j levels below the root t does while decoding. Its attention sees the target
context up to t (the keys of step 0, causal) and its own earlier steps at t (one key per step: the node's
ancestors). Step j's draft distribution is trained against the target's next-token distribution at position
t + 1 + j, restricted to the draft vocabulary and renormalised (cross-entropy, no feature regression), weighted
0.8^j, on reply tokens the draft vocabulary holds.

Training reads the same conversations as `eagle` (the feature cache's token ids and loss masks), so the two heads
see the same data. The fused features are added to the cache once (`features.add_layer_features`, one prefill; free
when `specbench distill --feature-layers` kept them while generating); the target's logits come from the cached
final hidden state through its lm_head, so training runs no target forward.
"""
from __future__ import annotations

from pathlib import Path

import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

from specbench.decode.target import LoadedModel
from specbench.methods.common.official import target_embedding
from specbench.methods.eagle3.checkpoint import head_config, save_head
from specbench.methods.eagle3.head import Eagle3Head, fused_layers
from specbench.train.features import FeatureCache, add_layer_features, draft_vocabulary
from specbench.train.training import Batch, TrainConfig, fit

STEP_WEIGHT = 0.8  # step j's loss weighs 0.8^j (the official trainer's choice)


def set_draft_vocabulary(head: Eagle3Head, target_ids: torch.Tensor) -> None:
    """d2t and t2d for a draft vocabulary, ordered by target id (as the official code orders it)."""
    ids = torch.sort(target_ids.to(torch.long)).values
    head.d2t.copy_(ids - torch.arange(len(ids)))
    head.t2d.zero_()
    head.t2d[ids] = True


def _attend(q: torch.Tensor, context: tuple[torch.Tensor, torch.Tensor],
            own: list[tuple[torch.Tensor, torch.Tensor]], scaling: float) -> torch.Tensor:
    """Attention of queries q [B, h, n, d] over the context's keys and values [B, h, n, d] (causal: query t sees
    keys 0..t) and, for each earlier step and this one, the single key and value at the query's own position
    (the node's ancestors). Written out rather than a dense mask over all steps' keys, as the official trainer
    does: step j then costs one n x n product, not j + 1 of them."""
    keys, values = context
    n = q.shape[2]
    scores = torch.matmul(q, keys.transpose(2, 3)) * scaling
    future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
    diagonal = [(q * k).sum(-1, keepdim=True) * scaling for k, _ in own]
    probs = torch.softmax(torch.cat([scores, *diagonal], dim=-1), dim=-1, dtype=torch.float32).to(values.dtype)
    out = torch.matmul(probs[..., :n], values)
    for i, (_, v) in enumerate(own):
        out = out + probs[..., n + i : n + i + 1] * v
    return out


def _step(head: Eagle3Head, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor,
          context: tuple[torch.Tensor, torch.Tensor] | None, own: list[tuple[torch.Tensor, torch.Tensor]]
          ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One step of the unroll through the head's own modules (Eagle3Head.forward and Eagle3Layer.forward, with the
    attention above): the head's hidden states [B, n, H] and this step's keys and values, GQA-expanded."""
    layer, attn = head.midlayer, head.midlayer.self_attn
    embedded, features = head.inputs(tokens, features)
    cos, sin = head.rotary_emb(features, positions)
    both = torch.cat([layer.input_layernorm(embedded), layer.hidden_norm(features)], dim=-1)
    shape = (*tokens.shape, -1, attn.head_dim)
    q = attn.q_proj(both).view(shape).transpose(1, 2)
    k = attn.k_proj(both).view(shape).transpose(1, 2)
    v = attn.v_proj(both).view(shape).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    kv = (repeat_kv(k, attn.num_key_value_groups), repeat_kv(v, attn.num_key_value_groups))
    if context is None:  # step 0: the context is this step's own keys
        attended = _attend(q, kv, [], attn.scaling)
    else:
        attended = _attend(q, context, own + [kv], attn.scaling)
    return layer.feed_forward(features + attn.o_proj(attended.transpose(1, 2).reshape(*tokens.shape, -1))), kv


def unroll(head: Eagle3Head, tokens: torch.Tensor, fused: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """The head's hidden states [B, n, H] at each step of the training-time test (see the module docstring)."""
    b, n = tokens.shape
    positions = torch.arange(n, device=fused.device).expand(b, n)
    features, out = fused, []
    context: tuple[torch.Tensor, torch.Tensor] | None = None  # step 0's keys and values: the target context
    own: list[tuple[torch.Tensor, torch.Tensor]] = []  # steps 1..j's, one per position
    for j in range(min(steps, n - 1)):
        step_tokens = torch.zeros_like(tokens)  # step j at position t reads token t + 1 + j (0 past the end)
        step_tokens[:, : n - 1 - j] = tokens[:, 1 + j :]
        features, kv = _step(head, step_tokens, features, positions + j, context, own)
        if context is None:
            context = kv
        else:
            own.append(kv)
        out.append(features)
    return out


class Eagle3Trainable:
    def __init__(self, head: Eagle3Head, target: torch.nn.Module, steps: int = 7, noise: float = 0.0) -> None:
        if steps < 1:
            raise ValueError("the training-time test needs steps >= 1")
        self.module = head
        self.target = target
        self.steps = steps
        self.noise = noise
        self.layers = fused_layers(target.config.num_hidden_layers)

    @torch.no_grad()
    def _target(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Fused features [B, n, 3H] and the target's next-token logits over the draft vocabulary [B, n, V_d]:
        from the feature cache when it holds this target's fused layers (the logits are then the target's
        lm_head over the cached final hidden state), else from a target forward."""
        device = self.target.device
        with torch.autocast(device.type, enabled=False):  # under mixed precision the target's side stays fp32
            return self._target_fp32(batch, device)

    def _target_fp32(self, batch: Batch, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        draft_ids = self.module.draft_to_target().to(device)
        if batch.fused is not None and batch.fused_layers == self.layers:
            lm_head = self.target.get_output_embeddings()
            bias = lm_head.bias[draft_ids] if lm_head.bias is not None else None
            logits = torch.nn.functional.linear(batch.hidden.to(device, lm_head.weight.dtype),
                                                lm_head.weight[draft_ids], bias)
            return batch.fused.to(device), logits.float()
        out = self.target(input_ids=batch.tokens.to(device), attention_mask=batch.valid.long().to(device),
                          output_hidden_states=True)
        fused = torch.cat([out.hidden_states[i] for i in self.layers], dim=-1).float()
        return fused, out.logits.float()[..., draft_ids]

    def loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        head = self.module
        device = head.fc.weight.device
        fused, target_logits = self._target(batch)
        fused, target_logits = fused.to(device), target_logits.to(device)
        if self.noise and head.training:
            fused = fused + torch.randn_like(fused) * self.noise
        tokens, valid = batch.tokens.to(device), batch.valid.to(device)
        trained = (batch.loss_mask & batch.valid).to(device)
        n = tokens.shape[1]
        in_vocab = head.t2d[tokens.roll(-1, dims=1)]  # the token each target distribution predicts is draftable
        target_p = torch.softmax(target_logits, dim=-1)
        total = torch.zeros((), device=device)
        metrics: dict[str, float] = {}
        for j, hidden in enumerate(unroll(head, tokens, fused, self.steps)):
            # Position t's step j predicts the target's distribution at t + 1 + j. Only the positions the loss
            # counts go through lm_head and the log-softmax (the draft vocabulary's product is the head's largest).
            where = trained[:, 1 + j :] & valid[:, 1 + j :] & in_vocab[:, 1 + j :]
            logp = torch.log_softmax(head.logits(hidden[:, : n - 1 - j][where]).float(), dim=-1)
            target = target_p[:, 1 + j :][where]
            step_loss = -(target * logp).sum() / where.sum().clamp(min=1)
            total = total + STEP_WEIGHT ** j * step_loss
            with torch.no_grad():
                hits = (logp.argmax(-1) == target.argmax(-1)).float()
                metrics[f"acc_step{j}"] = float(hits.mean()) if hits.numel() else 0.0
        metrics["loss"] = float(total.detach())
        metrics["top1"] = metrics.get("acc_step0", 0.0)
        return total, metrics

    def save(self, folder: Path) -> None:
        save_head(self.module, folder)


def train(target: LoadedModel, cache: FeatureCache, cfg: TrainConfig, options: dict[str, str]) -> dict[str, float]:
    """Train an EAGLE-3 head (options: draft_vocab=8192 (0 = the full vocabulary), steps=7, noise=0.0)."""
    model = target.model
    vocab = model.get_output_embeddings().weight.shape[0]
    size = int(options.get("draft_vocab", 8192))
    chosen = draft_vocabulary(cache, cfg.out, size, target.stop_ids) if 0 < size < vocab else None
    head = Eagle3Head(head_config(model.config, len(chosen) if chosen is not None else vocab))
    head.embed_tokens.weight.data.copy_(target_embedding(model).float())
    set_draft_vocabulary(head, chosen if chosen is not None else torch.arange(vocab))
    head.to(model.device)
    # The fused layers cached once (one prefill, or already written by `specbench distill --feature-layers`): the
    # training loop then runs no target forward.
    add_layer_features(cache, target, fused_layers(model.config.num_hidden_layers))
    trainable = Eagle3Trainable(head, model, int(options.get("steps", 7)), float(options.get("noise", 0.0)))
    return fit(trainable, cache, cfg)
