"""Shape targets (`--target shape:NAME`, TIMING ONLY): a model of a real architecture's shape, built from a config
shipped in the package (specbench/shapes/NAME.json: public config.json values, no weights), with random weights
drawn from a fixed seed, created directly on the run's device in its dtype; its tokenizer is the default target's.

What such a model emits means nothing, so its runs are timing only (specbench.run.timing_only): vanilla's timing is
the architecture's, and under synthetic acceptance (specbench.run.synthetic) every method's is too. A shape's
vocabulary may be larger than the tokenizer's: ids the tokenizer lacks are kept in the records' token ids and
left out of the answer's text (the default tokenizer's decode skips them)."""
from __future__ import annotations

import json
from importlib import resources

import psutil
import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

from specbench.decode.names import SHAPE_PREFIX, is_shape, shape_names
from specbench.errors import SpecbenchError

SHAPE_SEED = 0  # every shape's weights are the same on every run and machine of one torch version


def shape_config(name: str) -> PretrainedConfig:
    """The config of `shape:NAME` (or NAME)."""
    shape = name[len(SHAPE_PREFIX):] if is_shape(name) else name
    if shape.lower() not in shape_names():
        raise SpecbenchError(f"unknown shape {shape!r}: one of {', '.join(shape_names())}")
    text = resources.files("specbench.shapes").joinpath(f"{shape.lower()}.json").read_text(encoding="utf-8")
    values = {k: v for k, v in json.loads(text).items() if not k.startswith("_") and k != "architectures"}
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    config._attn_implementation = "sdpa"
    return config


def shape_model(name: str, device: torch.device, dtype: torch.dtype) -> PreTrainedModel:
    """The shape with random weights (seed SHAPE_SEED), allocated on `device` in `dtype` (never on the CPU first).
    The draw does not touch the process's own random state."""
    config = shape_config(name)
    check_fits(name, device, dtype)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.device(device):
        torch.manual_seed(SHAPE_SEED)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def check_fits(name: str, device: torch.device, dtype: torch.dtype) -> None:
    """One error line, before anything is allocated, when the shape's weights alone exceed the memory free on the
    device (Mixtral-8x7B needs about 94 GB in bf16)."""
    need = parameter_count(name) * torch.finfo(dtype).bits // 8
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    elif device.type == "cpu":
        free = psutil.virtual_memory().available
    else:
        return
    if need > free:
        raise SpecbenchError(f"{name}: its weights take {need / 1e9:.1f} GB in {str(dtype).removeprefix('torch.')}, "
                             f"more than the {free / 1e9:.1f} GB free on {device}")


def parameter_count(name: str) -> int:
    """The shape's parameters, counted on the meta device (nothing allocated)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(shape_config(name))
    return sum(p.numel() for p in model.parameters())
