"""EAGLE (Li et al. 2024): a one-layer draft head that autoregresses on the target's features.

The head takes concat[embedding of token t+1, feature t] (embedding first), projects it with fc (2H -> H), runs one
LLaMA decoder layer without its input norm, and predicts feature t+1; the target's frozen lm_head turns a feature
into draft logits. The feature is the target's final-norm hidden state, which the engine hands over from the
verification forward, so drafting costs no extra target pass.

`eagle` drafts an EAGLE-2 dynamic tree (expand the top_k best frontier nodes by cumulative draft log-prob for `depth`
steps, keep the total_tokens best nodes); `eagle1` drafts an EAGLE-1 static tree. Candidates are deterministic
top-k picks, verified by the engine's lossless rule at any temperature. The ablation heads (eagle-unshifted,
eagle-feature, eagle-token) change only what the head reads. `eagle-hass` drafts as `eagle` with a head trained
with HASS's objective (`train eagle --objective hass`, methods/eagle/objective.py), found under its own name.

Checkpoints use the official EAGLE-1/2 layout (config.json + model.safetensors or pytorch_model.bin with keys
embed_tokens.weight, fc.weight, fc.bias, layers.0.*), so heads move both ways. Ours add two keys to config.json that
official loaders ignore: "specbench_inputs" (the ablation variant), "specbench_draft_vocab" (the most frequent
reply tokens in the training data, most frequent first: a reduced draft vocabulary keeps the lm_head cheap on CPU)
and "specbench_objective" (what the head was trained with: EAGLE's or HASS's objective and its settings).
"""
from __future__ import annotations

from pathlib import Path

import torch

from specbench.decode.draft import Drafter, parse_tree
from specbench.decode.runner import ModelRunner
from specbench.decode.runtime import RuntimeInfo, frozen_linear, prepare_drafter
from specbench.errors import SpecbenchError
from specbench.method import BuildContext, MethodInfo, Option
from specbench.methods.common.feature_tree import (
    FeatureTreeDrafter,
    TreeSpec,
    dynamic_tree,
    size_automatically,
    tree_options,
)
from specbench.methods.common.official import target_embedding
from specbench.methods.common.random_drafter import RANDOM_FROM, seeded, wants_random
from specbench.methods.common.shipped import HEAD, trained_folder
from specbench.methods.eagle.checkpoint import find_head, load_head
from specbench.methods.eagle.head import EagleHead, head_config
from specbench.methods.eagle.objective import OBJECTIVE_KEY, OBJECTIVES
from specbench.methods.eagle.training import train

# Our CPU-sized default for eagle1: 25 nodes, depth 5 (the shape of EAGLE-1's default, our own choice of paths).
EAGLE1_TREE = (
    "[[0],[1],[2],[3],[0,0],[0,1],[0,2],[1,0],[1,1],[2,0],[3,0],[0,0,0],[0,0,1],[0,1,0],[1,0,0],[2,0,0],[0,2,0],"
    "[0,0,0,0],[0,0,0,1],[0,1,0,0],[1,0,0,0],[0,0,0,0,0],[0,0,0,0,1],[0,1,0,0,0],[1,0,0,0,0]]"
)


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
    chosen = ctx.option("head") or ctx.draft
    return Path(chosen) if chosen else find_head(ctx.target.name, ablation_inputs)


def _check_hass(head: EagleHead, folder: Path) -> None:
    """eagle-hass loads a head trained with HASS's objective, or one that does not say (an official HASS head)."""
    recorded = getattr(head.config, OBJECTIVE_KEY, None)
    name = recorded.get("name") if isinstance(recorded, dict) else recorded
    if name is not None and name != "hass":
        raise SpecbenchError(f"EAGLE head {folder} was trained with the {name!r} objective, not HASS's: decode it as "
                             "eagle, or train one with python -m specbench train eagle --objective hass")


def _build(ctx: BuildContext, static: bool, ablation_inputs: str | None = None, hass: bool = False) -> Drafter:
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


DRAFT_VOCAB = Option("draft_vocab", 0, "draft vocabulary rows used: 0 the head's own, N its N most frequent, -1 the "
                     "target's whole vocabulary", int, low=-1)
DYNAMIC = (HEAD, DRAFT_VOCAB, *tree_options(depth=5))
TREE_SIZES = ("", "total_tokens=4", "total_tokens=8", "total_tokens=16")  # what `tune` tries for eagle and eagle-hass
STATIC = (HEAD, DRAFT_VOCAB, Option("tree", EAGLE1_TREE, "the static tree, as JSON paths of ranks"))

METHODS = [
    MethodInfo("eagle", "EAGLE-2: feature-level draft head, dynamic tree (top_k=4, depth=5, total_tokens=auto: sized per step "
               "from this machine's measured verification cost)", True,
               lambda ctx: _build(ctx, static=False), TREE_SIZES, DYNAMIC),
    MethodInfo("eagle1", "EAGLE-1: the same head, static 25-node tree (--opt tree=JSON paths)", True,
               lambda ctx: _build(ctx, static=True), options=STATIC),
    MethodInfo("eagle-hass", "EAGLE-2's drafting with a head trained with HASS's objective (Zhang et al. 2025: top-K "
               "distillation and context alignment; train eagle --objective hass)", True,
               lambda ctx: _build(ctx, static=False, hass=True), TREE_SIZES, DYNAMIC),
] + [
    MethodInfo(f"eagle-{inputs}", f"EAGLE ablation head reading {what}, dynamic tree (the four ablation heads share "
               "one training budget)", True, lambda ctx, inputs=inputs: _build(ctx, False, ablation_inputs=inputs),
               options=DYNAMIC)
    for inputs, what in [("shifted", "feature + shifted token (EAGLE)"), ("unshifted", "feature + unshifted token"),
                         ("feature", "feature only"), ("token", "token only")]
]

TRAINERS = {"eagle": train}
OBJECTIVES_OF = {"eagle": OBJECTIVES}  # what `train METHOD --objective NAME` accepts
