"""The drafter and its build (what the method is, and its options: __init__.py)."""
from __future__ import annotations

import copy

from torch import nn
from transformers import PreTrainedModel

from specbench.decode.draft import Drafter
from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.methods.common.draft_model import DraftModelDrafter, draft_chain


def always_kept(config) -> set[int]:
    """Layers a view may not skip: 0, the last, and the first of each attention kind."""
    n = config.num_hidden_layers
    kinds = list(getattr(config, "layer_types", None) or [])
    firsts = {kinds.index(kind) for kind in set(kinds)}
    return {0, n - 1} | firsts


def evenly_skipped(config, ratio: float) -> list[int]:
    """round(ratio x layers) layers to skip, spread evenly over the layers a view may skip."""
    if not 0 <= ratio < 1:
        raise SpecbenchError(f"ratio={ratio}: the share of layers to skip must be in [0, 1)")
    candidates = [i for i in range(config.num_hidden_layers) if i not in always_kept(config)]
    count = min(len(candidates), round(ratio * config.num_hidden_layers))
    if count == 0:
        return []
    step = len(candidates) / count
    return sorted({candidates[int(j * step + step / 2)] for j in range(count)})


def layer_skip_view(model: PreTrainedModel, skip: list[int]) -> PreTrainedModel:
    decoder = model.get_decoder()
    config = decoder.config
    n = config.num_hidden_layers
    bad = sorted(set(skip) & always_kept(config)) + sorted(i for i in skip if not 0 <= i < n)
    if bad:
        raise SpecbenchError(f"cannot skip layer {bad[0]} of {n}: layer 0, the last layer and the first layer of "
                             "each attention kind are always kept")
    kept = [i for i in range(n) if i not in set(skip)]
    view_decoder = copy.copy(decoder)
    view_decoder._modules = dict(decoder._modules)  # its own registry: the target's decoder keeps all its layers
    view_decoder._modules["layers"] = nn.ModuleList([decoder.layers[i] for i in kept])
    view_config = copy.copy(config)
    view_config.num_hidden_layers = len(kept)
    if getattr(config, "layer_types", None):
        view_config.layer_types = [config.layer_types[i] for i in kept]  # the loop indexes them by position
    view_decoder.config = view_config
    view = copy.copy(model)
    view._modules = dict(model._modules)
    names = [name for name, module in model._modules.items() if module is decoder]
    if not names:
        raise SpecbenchError(f"{type(model).__name__}: cannot find its decoder among its modules to skip layers")
    view._modules[names[0]] = view_decoder
    return view


def skipped_layers(ctx: BuildContext) -> list[int]:
    config = ctx.target.model.get_decoder().config
    if ctx.option("skip") is not None:
        try:
            return sorted({int(i) for i in ctx.option("skip").split(",") if i.strip()})
        except ValueError:
            raise SpecbenchError(f"skip={ctx.option('skip')!r}: expected comma-separated layer indices") from None
    return evenly_skipped(config, ctx.option("ratio"))


def build(ctx: BuildContext) -> Drafter:
    model = ctx.target.model
    view = layer_skip_view(model, skipped_layers(ctx))
    vocab = model.get_output_embeddings().weight.shape[0]
    # The view's cache has a slot for every layer of the target (its layers keep their indices).
    chain = draft_chain(view, ctx.target.runner, layers=model.get_decoder().config.num_hidden_layers)
    return DraftModelDrafter(view, ctx.option("gamma"), vocab, chain=chain)
