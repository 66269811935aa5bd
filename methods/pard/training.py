"""Training PARD's draft (An et al. 2025, "PARD: Accelerating LLM Inference with Low-Cost PARallel Draft Model
Adaptation"): the sps draft (or a fresh one of its shape) learns to predict the next K tokens from one forward over
[context, MASK x (K-1)], by distillation from cached target features through the shared fit().

One training row is K copies of a conversation of n tokens, side by side: copy 0 the tokens themselves, copy c >= 1
mask tokens. The mask at copy c, position p stands for "the c-th unknown token after anchor a = p - c": it sees the
real tokens 0..a of copy 0 and the masks at positions a+1..p of copies 1..c (the one mask of each copy that shares
its anchor), at position ids as at inference, and learns the target's next-token distribution at p. So every anchor
of a conversation trains every depth in one forward, exactly as inference feeds it."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import LlamaForCausalLM, PreTrainedModel

from specbench.decode.target import LoadedModel
from specbench.errors import SpecbenchError
from specbench.methods.common.small_draft import is_small_draft, load_small_draft, save_small_draft, small_draft
from specbench.shipped import shipped_folder
from specbench.train.features import FeatureCache, draft_vocabulary
from specbench.train.training import Batch, TrainConfig, fit

MASK_KEY = "specbench_pard_mask_token"  # config.json: the id the draft reads as a mask token
DEPTH_KEY = "specbench_pard_k"  # config.json: the K it was trained for


def mask_token(vocab_size: int, draft_vocab: torch.Tensor | None, avoid: set[int]) -> int:
    """The mask token: the highest id the draft never drafts (outside its reduced vocabulary: a rare token) and no
    stop token; the draft shares the target's frozen embedding, so its layers learn to read that row as a mask."""
    never = set() if draft_vocab is None else set(draft_vocab.tolist())
    return next(t for t in range(vocab_size - 1, -1, -1) if t not in never and t not in avoid)


def copies(tokens: torch.Tensor, valid: torch.Tensor, k: int, mask: int) -> tuple[torch.Tensor, ...]:
    """A batch's K copies [B, K*n]: input ids, position ids, and the additive attention mask [B, 1, K*n, K*n]."""
    rows, n = tokens.shape
    device = tokens.device
    ids = torch.cat([tokens, tokens.new_full((rows, (k - 1) * n), mask)], dim=1)
    pos = torch.arange(n, device=device).repeat(k)  # [K*n]
    copy = torch.arange(k, device=device).repeat_interleave(n)
    anchor = pos - copy
    sees_real = (copy[None, :] == 0) & (pos[None, :] <= anchor[:, None])
    same_anchor = pos[None, :] - copy[None, :] == anchor[:, None]
    sees_mask = (copy[None, :] >= 1) & (copy[None, :] <= copy[:, None]) & same_anchor
    allowed = (sees_real | sees_mask)[None] & valid.repeat(1, k)[:, None, :]
    allowed |= torch.eye(k * n, dtype=torch.bool, device=device)[None]  # a query with no anchor sees itself
    lowest = torch.finfo(torch.float32).min
    additive = torch.zeros(allowed.shape, device=device).masked_fill_(~allowed, lowest)[:, None]
    return ids, pos.expand(rows, -1), additive


class PardTrainable:
    """Distillation at every depth: cross-entropy of the draft at copy c, position p against the target's next-token
    distribution at p (over the draft vocabulary), on reply positions whose anchor p - c is a real token."""

    def __init__(self, draft: LlamaForCausalLM, draft_vocab: torch.Tensor | None, mask: int, k: int) -> None:
        self.module, self.draft_vocab, self.mask, self.k = draft, draft_vocab, mask, k
        weight = draft.lm_head.weight.detach().float()
        self.lm_head = weight if draft_vocab is None else weight[draft_vocab.to(weight.device)].contiguous()

    def loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        n = batch.tokens.shape[1]
        ids, pos, attention = copies(batch.tokens, batch.valid, self.k, self.mask)
        hidden = self.module.model(input_ids=ids, position_ids=pos, attention_mask=attention).last_hidden_state
        losses, top1 = [], []
        for c in range(self.k):
            train_at = batch.loss_mask & batch.valid
            train_at[:, :c] = False  # no real anchor before the masks
            draft_logits = hidden[:, c * n : (c + 1) * n][train_at] @ self.lm_head.T
            wanted = batch.hidden[train_at] @ self.lm_head.T
            losses.append(-(wanted.softmax(-1) * draft_logits.log_softmax(-1)).sum(-1))
            top1.append((draft_logits.argmax(-1) == wanted.argmax(-1)).float().mean())
        loss = torch.cat(losses).mean()
        return loss, {"kd_loss": float(loss.detach()), "top1": float(top1[0]), f"top1_k{self.k}": float(top1[-1])}

    def save(self, folder: Path) -> None:
        save_pard(self.module, folder, self.draft_vocab, self.mask, self.k)


def save_pard(draft: LlamaForCausalLM, folder: Path, draft_vocab: torch.Tensor | None, mask: int, k: int) -> None:
    """sps's compact format (its own layers only), the mask token and K in its config.json."""
    save_small_draft(draft, folder, draft_vocab)
    config = json.loads((folder / "config.json").read_text())
    config[MASK_KEY], config[DEPTH_KEY] = mask, k
    (folder / "config.json").write_text(json.dumps(config, indent=1))


def is_pard(folder: Path) -> bool:
    return is_small_draft(folder) and MASK_KEY in json.loads((folder / "config.json").read_text())


def load_pard(folder: Path, target: PreTrainedModel) -> tuple[LlamaForCausalLM, torch.Tensor | None, int]:
    """The draft, its reduced vocabulary (or None) and its mask token."""
    if not is_pard(folder):
        raise SpecbenchError(f"{folder} is not a PARD draft (no {MASK_KEY} in its config.json): train one with "
                             "`specbench train pard --target TARGET --out FOLDER`")
    draft, vocab = load_small_draft(folder, target)
    return draft, vocab, int(json.loads((folder / "config.json").read_text())[MASK_KEY])


def starting_draft(target: LoadedModel, cache: FeatureCache, cfg: TrainConfig,
                   options: dict[str, str]) -> tuple[LlamaForCausalLM, torch.Tensor | None]:
    """init=sps (default: the sps draft shipped for the target), init=FOLDER (an sps draft), or init=scratch (a
    fresh draft of sps's shape: layers=2, draft_vocab=8192, as `train sps-draft` starts)."""
    init = options.get("init", "sps")
    if init == "scratch":
        draft = small_draft(target.model, int(options.get("layers", 2)))
        return draft, draft_vocabulary(cache, cfg.out, int(options.get("draft_vocab", 8192)), target.stop_ids)
    folder = shipped_folder("sps", target.name) if init == "sps" else Path(init)
    if folder is None or not is_small_draft(folder):
        raise SpecbenchError(f"train pard: no sps draft to init from (init={init}): --opt init=FOLDER (a "
                             "`train sps-draft` output) or --opt init=scratch")
    return load_small_draft(folder, target.model)


def train(target: LoadedModel, cache: FeatureCache, cfg: TrainConfig, options: dict[str, str]) -> dict[str, float]:
    """Train a PARD draft (options: init=sps|scratch|FOLDER, k=4; from scratch also layers=2, draft_vocab=8192)."""
    k = int(options.get("k", 4))
    if k < 2:
        raise SpecbenchError(f"train pard: k must be >= 2 (tokens predicted per forward), got {k}")
    draft, draft_vocab = starting_draft(target, cache, cfg, options)
    draft.to(target.model.device)  # trained on the target's device (its embedding and lm_head are the target's)
    mask = mask_token(draft.config.vocab_size, draft_vocab, target.stop_ids)
    return fit(PardTrainable(draft, draft_vocab, mask, k), cache, cfg)
