"""Self-speculation: the target's own modules as a draft model, some decoder layers skipped (SWIFT, Draft & Verify).

`layer_skip_view` returns a model that shares every weight with the target but runs only the kept decoder layers:
a shallow copy of the target and of its decoder, each with its own module registry (the target's is never touched),
the decoder's layer list cut to the kept layers and its config to their layer types. The view runs with a cache of
its own (a kv.SlotCache, through the drafter's runner; or use_cache=False), never the target's verification cache. Each kept layer keeps its index into that cache,
so the skipped layers' slots stay empty; transformers sizes its masks from the first layer of each attention kind,
which is therefore always kept, as are the last layer and layer 0.
"""
from __future__ import annotations

import copy

from torch import nn
from transformers import PreTrainedModel

from specbench.errors import SpecbenchError


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
