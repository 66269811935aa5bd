"""One line for a target whose own forward fails while a run measures its costs, warms up or decodes (a family
transformers cannot run under the engine's masks, a broken config value, memory): "target NAME (FAMILY family)
failed in STEP: ExcType: message". Only an exception raised inside the target's forward becomes that line; any
other keeps its traceback (a bug in specbench or in a method is not the target's)."""
from __future__ import annotations

import traceback
from contextlib import contextmanager
from typing import Iterator

from torch import nn

from specbench.decode.target import LoadedModel
from specbench.errors import SpecbenchError


def raised_inside(exc: BaseException, module: nn.Module) -> bool:
    """Whether the exception came out of the module's forward (a frame of its call is on the traceback)."""
    return any(frame.f_locals.get("self") is module for frame, _ in traceback.walk_tb(exc.__traceback__))


def failure_line(target: LoadedModel, step: str, exc: BaseException) -> str:
    family = getattr(target.model.config, "model_type", None) or type(target.model).__name__
    message = (str(exc).strip().splitlines() or [""])[0]
    return f"target {target.name} ({family} family) failed in {step}: {type(exc).__name__}: {message}"


@contextmanager
def target_step(target: LoadedModel, step: str) -> Iterator[None]:
    """Run a step of the run that calls the target; a failure inside the target's forward becomes one line."""
    try:
        yield
    except SpecbenchError:
        raise
    except Exception as exc:
        if not raised_inside(exc, target.model):
            raise
        raise SpecbenchError(failure_line(target, step, exc)) from exc
