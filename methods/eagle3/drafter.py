"""EAGLE-3's head as the feature-tree drafter sees it (methods/eagle3/__init__.py says what the method is), a shape
target's random head, and the build."""
from __future__ import annotations

from pathlib import Path

from specbench.decode.draft import Drafter
from specbench.decode.runtime import prepare_drafter
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.common.feature_tree import FeatureTreeDrafter, dynamic_tree, size_automatically
from specbench.methods.common.official import target_embedding
from specbench.methods.common.random_drafter import RANDOM_FROM, seeded, wants_random
from specbench.methods.eagle3.checkpoint import head_config, load_head
from specbench.methods.eagle3.head import Eagle3Head, fused_layers
from specbench.shipped import shipped_folder

RANDOM_DRAFT_VOCAB = 32000  # the draft vocabulary of the official EAGLE-3 heads for Llama 3.1 8B


class Eagle3FeatureHead:
    """An Eagle3Head as specbench.methods.common.feature_tree sees it: it reads the fused target layers at known positions and its
    own hidden state below them; draft logits come from its own lm_head over the draft vocabulary."""

    shift = 1  # position t reads token t + 1, as EAGLE

    def __init__(self, head: Eagle3Head, target_layers: int) -> None:
        self.head = head.eval()
        # The layers its checkpoint names (SpecForge's eagle_config), else EAGLE-3's own choice.
        self.hidden_layers = getattr(head.config, "aux_layer_ids", None) or fused_layers(target_layers)
        self.device, self.dtype = head.fc.weight.device, head.fc.weight.dtype
        self.feature_size = head.fc.in_features
        self.target_ids = head.draft_to_target().tolist()

    def run(self, tokens, features, positions, mask, cache, **cache_kwargs):
        return self.head(tokens, features, positions, mask, cache, **cache_kwargs)

    def draft_logits(self, hidden):
        return self.head.logits(hidden)


def find_head(target_name: str) -> Path:
    folder = shipped_folder("eagle3", target_name)
    if folder is None:
        raise SpecbenchError(f"no trained EAGLE-3 head ships for target {target_name!r}: pass --draft HEAD_FOLDER "
                             "(an official EAGLE-3 checkpoint works), or train one with python -m specbench train eagle3")
    return folder


def random_head(target) -> Eagle3Head:
    """A shape target's head: random weights, the official heads' 32k draft vocabulary (the target's first ids)."""
    vocab = target.get_output_embeddings().weight.shape[0]
    with seeded("eagle3", target.device):
        head = Eagle3Head(head_config(target.config, min(RANDOM_DRAFT_VOCAB, vocab)))
    head.embed_tokens.weight.data = target_embedding(target)
    head.t2d[: head.config.draft_vocab_size] = True  # d2t stays 0: draft id i is target id i
    return head


def build(ctx: BuildContext) -> Drafter:
    target = ctx.target.model
    if wants_random(ctx):
        head, folder = random_head(target), RANDOM_FROM
    else:
        folder = ctx.chosen_folder() or find_head(ctx.target.name)
        head = load_head(folder, target_embedding(target))
    config = target.config
    if head.config.vocab_size != target.get_output_embeddings().weight.shape[0] or \
            head.fc.in_features != 3 * config.hidden_size:
        raise SpecbenchError(f"EAGLE-3 head {folder} does not fit target {ctx.target.name} (vocabulary or hidden size)")
    named = getattr(head.config, "aux_layer_ids", None) or ()
    if any(i > config.num_hidden_layers for i in named):
        raise SpecbenchError(f"EAGLE-3 head {folder} reads target hidden states {list(named)}; target "
                             f"{ctx.target.name} has {config.num_hidden_layers} layers")
    head.to(target.device, target.dtype)
    prepare_drafter(head, ctx.target.runtime)
    adapter = Eagle3FeatureHead(head, config.num_hidden_layers)
    spec = dynamic_tree(ctx.options)
    drafter = FeatureTreeDrafter(adapter, spec, ctx.target.runner)
    if ctx.option("total_tokens") == "auto":
        size_automatically(drafter, ctx, f"eagle3-level:hidden={head.config.hidden_size}:"
                                         f"vocab={head.config.draft_vocab_size}:top_k={spec.top_k}")
    drafter.trained_from = str(folder)
    return drafter
