"""`python -m specbench train dflash`: DFlash's block training over the feature cache, through the shared fit().

Each conversation gets anchors drawn at random among its reply positions (about one per B-1 reply tokens, drawn
anew each time a batch is met, as the reference samples anchors each epoch). Anchor a's block is [token a, MASK x
(B-1)] at positions a .. a+B-1: it sees the context features of positions 0 .. a-1 (the target's cached layer states;
at inference the positions the target has cached) and its own block, non-causally, and no other block. Block
position k (1 .. B-1) learns the target's distribution of the token at a + k (its next-token distribution at
a + k - 1, the target's lm_head over the cached final state: distillation, so training runs no target forward),
weighted exp(-(k-1)/gamma) (the reference's decay: early positions decide acceptance). The draft starts from random
weights, as the reference's; the target's embedding and lm_head are shared and frozen.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, PreTrainedModel

from specbench.decode.target import LoadedModel
from specbench.errors import SpecbenchError
from specbench.methods.common.target_layers import fused_layers
from specbench.methods.dflash.model import (
    BLOCK_KEY,
    LAYERS_KEY,
    MASK_TOKEN_KEY,
    QK_NORM_KEY,
    DFlashDraft,
    dflash_config,
)
from specbench.train.features import FeatureCache, add_layer_features
from specbench.train.training import Batch, TrainConfig, fit

DFLASH_KEY = "specbench_dflash"  # config.json: marks a DFlash draft


def anchors(loss_mask: torch.Tensor, valid: torch.Tensor, block: int, generator: torch.Generator | None
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, about one anchor per block-1 trainable positions, drawn among them without replacement, in order:
    positions [rows, A] and which are real [rows, A] (rows with fewer anchors are padded with position 0)."""
    trainable = (loss_mask & valid).cpu()
    picks = []
    for row in trainable:
        where = row.nonzero().flatten()
        count = math.ceil(len(where) / (block - 1))
        picks.append(where[torch.randperm(len(where), generator=generator)[:count]].sort().values)
    width = max(1, max(map(len, picks)))
    at = torch.zeros(len(picks), width, dtype=torch.long)
    real = torch.zeros(len(picks), width, dtype=torch.bool)
    for r, pick in enumerate(picks):
        at[r, : len(pick)], real[r, : len(pick)] = pick, True
    return at.to(loss_mask.device), real.to(loss_mask.device)


def block_mask(at: torch.Tensor, valid: torch.Tensor, block: int, dtype: torch.dtype
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """A row's blocks side by side after its context: the additive mask [rows, 1, A*B, n + A*B] (a block's queries
    see the valid context positions before their anchor and their own block, nothing else) and the position ids
    [rows, n + A*B] (context 0 .. n-1, anchor a's block a .. a+B-1)."""
    rows, count = at.shape
    n, device = valid.shape[1], at.device
    anchor = at.repeat_interleave(block, dim=1)  # [rows, A*B] each block column's anchor
    sees_context = (torch.arange(n, device=device)[None, None, :] < anchor[:, :, None]) & valid[:, None, :]
    which = torch.arange(count, device=device).repeat_interleave(block)
    sees_block = (which[:, None] == which[None, :])[None].expand(rows, -1, -1)
    allowed = torch.cat([sees_context, sees_block], dim=-1)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, torch.finfo(dtype).min)
    block_pos = anchor + torch.arange(block, device=device).repeat(count)
    return mask[:, None], torch.cat([torch.arange(n, device=device).expand(rows, -1), block_pos], dim=1)


class DFlashTrainable:
    def __init__(self, draft: DFlashDraft, block: int, gamma: float) -> None:
        self.module, self.block, self.gamma = draft, block, gamma
        self.layers = draft.target_layers

    def loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        if batch.fused is None or batch.fused_layers != self.layers:
            raise SpecbenchError(f"train dflash: the feature cache holds layers {batch.fused_layers}, the draft reads "
                                 f"{self.layers}")
        draft, block = self.module, self.block
        device = draft.fc.weight.device
        tokens, valid, loss_mask = batch.tokens.to(device), batch.valid.to(device), batch.loss_mask.to(device)
        rows, n = tokens.shape
        # Evaluation draws the same anchors each time (a fixed generator); training draws anew.
        generator = None if draft.training else torch.Generator().manual_seed(0)
        at, real = anchors(loss_mask, valid, block, generator)
        count = at.shape[1]
        mask, positions = block_mask(at, valid, block, draft.fc.weight.dtype)
        block_in = draft.block_inputs(tokens.gather(1, at).flatten(), block).view(rows, count * block, -1)
        hidden = draft.hidden_states(block_in, draft.context(batch.fused.to(device)), positions, mask)
        hidden = hidden.view(rows, count, block, -1)[:, :, 1:]  # [rows, A, B-1, H] the mask positions
        ahead = torch.arange(1, block, device=device)
        drafted = at[:, :, None] + ahead  # [rows, A, B-1] the position each mask drafts
        usable = real[:, :, None] & (drafted < n)
        drafted = drafted.clamp(max=n - 1)
        row = torch.arange(rows, device=device)[:, None, None]
        usable &= valid[row, drafted] & loss_mask[row, drafted - 1]
        weights = torch.exp(-(ahead - 1).float() / self.gamma).expand_as(usable)[usable]
        logp = torch.log_softmax(draft.logits(hidden[usable]).float(), dim=-1)
        with torch.no_grad():
            wanted = torch.softmax(draft.logits(batch.hidden.to(device)[row, drafted - 1][usable]).float(), dim=-1)
        loss = (weights * -(wanted * logp).sum(-1)).sum() / weights.sum().clamp(min=1e-6)
        with torch.no_grad():
            hits = (logp.argmax(-1) == wanted.argmax(-1)).float()
            first = hits[ahead.expand_as(usable)[usable] == 1]
        return loss, {"kd_loss": float(loss.detach()), "top1": float(first.mean()) if len(first) else 0.0,
                      "top1_all": float(hits.mean()) if len(hits) else 0.0}

    def save(self, folder: Path) -> None:
        save_dflash(self.module, folder)


def save_dflash(draft: DFlashDraft, folder: Path) -> None:
    """config.json (the draft's LlamaConfig with its block size and target layers) and its own weights."""
    folder.mkdir(parents=True, exist_ok=True)
    config = draft.config.to_dict()
    config[DFLASH_KEY] = True
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    save_file({k: v.detach().to("cpu").contiguous() for k, v in draft.own_state().items()},
              str(folder / "model.safetensors"))


def zlab_config(folder: Path, raw: dict, target: PreTrainedModel) -> LlamaConfig:
    """Our config for a draft in z-lab's published layout (a Qwen3 config with block_size and dflash_config's
    mask_token_id and target_layer_ids: 0-based decoder layers, whose outputs are output_hidden_states[id + 1])."""
    extra = raw.get("dflash_config") or {}
    ids, mask, block = extra.get("target_layer_ids"), extra.get("mask_token_id"), raw.get("block_size")
    layers = target.config.num_hidden_layers
    if not (isinstance(ids, list) and ids and all(isinstance(i, int) and 0 <= i < layers for i in ids)):
        raise SpecbenchError(f"{folder}: dflash_config.target_layer_ids {ids} are not layers of the target "
                             f"(0..{layers - 1})")
    if not isinstance(mask, int) or not 0 <= mask < target.config.vocab_size:
        raise SpecbenchError(f"{folder}: dflash_config.mask_token_id {mask} is not a token of the target's vocabulary")
    if not isinstance(block, int) or block < 2:
        raise SpecbenchError(f"{folder}: block_size {block} (a z-lab DFlash draft names its block size, >= 2)")
    if raw.get("use_sliding_window") or "sliding_attention" in (raw.get("layer_types") or []):
        raise SpecbenchError(f"{folder}: sliding-window draft layers are not read here")
    rope = {**(raw.get("rope_scaling") or {"rope_type": "default"}), "rope_theta": float(raw.get("rope_theta", 1e6))}
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "rms_norm_eps", "max_position_embeddings")
    config = LlamaConfig(**{k: raw[k] for k in keys if k in raw}, rope_parameters=rope, attention_bias=False,
                         tie_word_embeddings=False)
    for key, value in ((BLOCK_KEY, block), (LAYERS_KEY, [i + 1 for i in ids]), (MASK_TOKEN_KEY, mask),
                       (QK_NORM_KEY, True)):
        setattr(config, key, value)
    return config


def zlab_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """z-lab's weight names under ours: layers.{i}.self_attn.* are our layers' own."""
    return {k.replace(".self_attn.", ".", 1): v for k, v in state.items()}


def load_dflash(folder: Path, target: PreTrainedModel) -> DFlashDraft:
    """A DFlash draft as we train it (config.json marked specbench_dflash) or as z-lab publishes it (dflash_config)."""
    config_file = folder / "config.json"
    raw = json.loads(config_file.read_text()) if config_file.is_file() else {}
    zlab = "dflash_config" in raw and not raw.get(DFLASH_KEY)
    if not raw.get(DFLASH_KEY) and not zlab:
        raise SpecbenchError(f"{folder} is not a DFlash draft (no {DFLASH_KEY} or dflash_config in its config.json): "
                             "train one with `specbench train dflash`")
    if zlab:
        config = zlab_config(folder, raw, target)
    else:
        config = LlamaConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "model_type", DFLASH_KEY)})
    if config.hidden_size != target.config.hidden_size or max(getattr(config, LAYERS_KEY)) > \
            target.config.num_hidden_layers:
        raise SpecbenchError(f"DFlash draft {folder} does not fit the target (hidden size or layers read)")
    draft = DFlashDraft(config).share(target)
    state = {k: v.float() for k, v in load_file(str(folder / "model.safetensors")).items()}
    missing, unexpected = draft.load_state_dict(zlab_state(state) if zlab else state, strict=False)
    if unexpected or any(not k.startswith("lm_head.") for k in missing):
        raise SpecbenchError(f"{folder}: weights do not match its config "
                             f"({'unexpected ' + unexpected[0] if unexpected else 'missing ' + missing[0]})")
    return draft.to(target.device, target.dtype).eval()


def train(target: LoadedModel, cache: FeatureCache, cfg: TrainConfig, options: dict[str, str]) -> dict[str, float]:
    """Train a DFlash draft (options: layers=1, block=8, gamma=4: the loss decay)."""
    model = target.model
    block, layers, gamma = int(options.get("block", 8)), int(options.get("layers", 1)), float(options.get("gamma", 4))
    if block < 2 or layers < 1 or gamma <= 0:
        raise SpecbenchError(f"train dflash: needs block >= 2, layers >= 1, gamma > 0 (got {block}, {layers}, {gamma})")
    read = fused_layers(model.config.num_hidden_layers)
    draft = DFlashDraft(dflash_config(model.config, layers, block, read)).share(model).to(model.device)
    add_layer_features(cache, target, read)  # one prefill, or nothing when the cache holds these layers
    return fit(DFlashTrainable(draft, block, gamma), cache, cfg)
