"""Random drafters for shape targets (`--target shape:NAME`, TIMING ONLY): a trained method whose target has
random weights builds its drafter at the target's shape with random weights (no shipped drafter fits a shape),
seeded by the method's name, so that its system cost per step is measured; its acceptance then means something
only under synthetic acceptance (specbench.run.synthetic). --draft or method@head=FOLDER still loads a folder."""
from __future__ import annotations

import copy
import zlib
from contextlib import contextmanager
from typing import Iterator

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from specbench.decode.shapes import is_shape
from specbench.method import BuildContext

RANDOM_FROM = "random, the target's shape (TIMING-ONLY)"  # what the budget table shows as its training


def wants_random(ctx: BuildContext) -> bool:
    """The target is a shape and no trained drafter was named: the method builds a random one."""
    return is_shape(ctx.target.name) and not (ctx.option("head") or ctx.draft)


@contextmanager
def seeded(method: str, device: torch.device) -> Iterator[None]:
    """Modules built inside draw their random weights from a seed of the method's name, on `device`, without
    touching the process's own random state."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.device(device):
        torch.manual_seed(zlib.crc32(method.encode()))
        yield


def random_draft_model(target: PreTrainedModel, method: str, layers: int = 2) -> PreTrainedModel:
    """A draft LM for a shape target: the target's own architecture cut to `layers` decoder layers (its vocabulary,
    hidden size and heads; a 2-layer draft of a 16-layer 1B shape, as the 2-layer draft trained for the default
    target), random weights seeded by the method's name, on the target's device and in its dtype."""
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = min(layers, config.num_hidden_layers)
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[: config.num_hidden_layers]
    with seeded(method, target.device):
        return AutoModelForCausalLM.from_config(config, dtype=target.dtype).eval()
