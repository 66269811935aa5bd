"""EAGLE-1/2's drafter over the one-layer head (methods/eagle/__init__.py says what the method is) and its build:
`build(ctx, static, ablation_inputs, hass)` for every method the package declares."""
from __future__ import annotations

from pathlib import Path

import torch

from specbench.decode.draft import Drafter, parse_tree
from specbench.decode.runner import ModelRunner
from specbench.decode.runtime import RuntimeInfo, frozen_linear, prepare_drafter
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.common.feature_tree import (
    FeatureTreeDrafter,
    TreeSpec,
    dynamic_tree,
    size_automatically,
)
from specbench.methods.common.official import target_embedding
from specbench.methods.common.random_drafter import RANDOM_FROM, seeded, wants_random
from specbench.methods.common.shipped import trained_folder
from specbench.methods.eagle.checkpoint import find_head, load_head
from specbench.methods.eagle.head import EagleHead, head_config
from specbench.methods.eagle.objective import OBJECTIVE_KEY


class EagleFeatureHead:
    """An EagleHead as specbench.methods.common.feature_tree sees it: it reads the target's final-norm hidden state, and the
    target's own lm_head (restricted to the draft vocabulary) turns a predicted feature into draft logits."""

    hidden_layers = (-1,)

    def __init__(self, head: EagleHead, lm_head: torch.Tensor, draft_vocab: torch.Tensor | None,
                 runtime: RuntimeInfo | None = None) -> None:
        self.head = head.eval()
        self.shift = head.shift
        self.device, self.dtype = head.fc.weight.device, head.fc.weight.dtype
        self.feature_size = head.config.hidden_size
        vocab = (draft_vocab if draft_vocab is not None else torch.arange(lm_head.shape[0])).to(self.device)
        self.lm_head = frozen_linear(lm_head.detach()[vocab].to(self.device, self.dtype).contiguous(), runtime)
        self.target_ids = vocab.tolist()

    def run(self, tokens, features, positions, mask, cache, **cache_kwargs):
        return self.head(tokens, features, positions, mask, cache, **cache_kwargs)

    def draft_logits(self, predicted):
        return self.lm_head(predicted)


class EagleDrafter(FeatureTreeDrafter):
    def __init__(self, head: EagleHead, lm_head: torch.Tensor, draft_vocab: torch.Tensor | None, tree: TreeSpec,
                 runtime: RuntimeInfo | None = None, target: ModelRunner | None = None):
        super().__init__(EagleFeatureHead(head, lm_head, draft_vocab, runtime), tree, target)


def _head_folder(ctx: BuildContext, ablation_inputs: str | None, hass: bool) -> Path:
    """head=FOLDER (e.g. eagle@head=...) compares heads side by side in one run; --draft sets it for every method;
    else the head shipped for the target: eagle-hass's under its own name."""
    if hass:
        return trained_folder(ctx, "eagle-hass", "EAGLE-HASS head", "eagle --objective hass")
    return ctx.chosen_folder() or find_head(ctx.target.name, ablation_inputs)


def _check_hass(head: EagleHead, folder: Path) -> None:
    """eagle-hass loads a head trained with HASS's objective, or one that does not say (an official HASS head)."""
    recorded = getattr(head.config, OBJECTIVE_KEY, None)
    name = recorded.get("name") if isinstance(recorded, dict) else recorded
    if name is not None and name != "hass":
        raise SpecbenchError(f"EAGLE head {folder} was trained with the {name!r} objective, not HASS's: decode it as "
                             "eagle, or train one with python -m specbench train eagle --objective hass")


def build(ctx: BuildContext, static: bool, ablation_inputs: str | None = None, hass: bool = False) -> Drafter:
    target = ctx.target.model
    if wants_random(ctx):  # a shape target: a random head of its shape, the target's own embedding
        with seeded("eagle", target.device):
            head = EagleHead(head_config(target.config, ablation_inputs or "shifted"))
        head.embed_tokens.weight.data, draft_vocab, folder = target_embedding(target), None, RANDOM_FROM
    else:
        folder = _head_folder(ctx, ablation_inputs, hass)
        head, draft_vocab = load_head(folder, target_embedding(target))
        if hass:
            _check_hass(head, folder)
    lm_head = target.get_output_embeddings().weight
    if head.config.hidden_size != lm_head.shape[1] or head.embed_tokens.weight.shape[0] != lm_head.shape[0]:
        raise SpecbenchError(f"EAGLE head {folder} does not fit target {ctx.target.name} (hidden or vocab size)")
    vocab_size = ctx.option("draft_vocab")
    if draft_vocab is not None and vocab_size > 0:
        draft_vocab = draft_vocab[:vocab_size]
    if vocab_size < 0:
        draft_vocab = None  # draft_vocab=-1: the full vocabulary
    head.to(target.device, target.dtype)
    prepare_drafter(head, ctx.target.runtime)
    spec = TreeSpec(static_paths=parse_tree(ctx.option("tree"))) if static else dynamic_tree(ctx.options)
    drafter = EagleDrafter(head, lm_head, draft_vocab, spec, ctx.target.runtime, ctx.target.runner)
    if not static and ctx.option("total_tokens") == "auto":
        rows = len(draft_vocab) if draft_vocab is not None else lm_head.shape[0]
        size_automatically(drafter, ctx, f"eagle-level:hidden={head.config.hidden_size}:vocab={rows}:top_k={spec.top_k}")
    drafter.trained_from = str(folder)
    return drafter
