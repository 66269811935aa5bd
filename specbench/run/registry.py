"""Method discovery: every module in the `specbench.methods` package (the top-level methods/ folder) lists its methods in `METHODS`.

New methods appear in the CLI, records and reports by adding a file to methods/; nothing here names a method.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable

from specbench.decode.cost_model import CostModel
from specbench.decode.draft import Drafter
from specbench.decode.target import LoadedModel
from specbench.errors import SpecbenchError


@dataclass
class BuildContext:
    """What a method's builder gets: the loaded target, --draft, and its --opt key=value options."""

    target: LoadedModel
    draft: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    device: str | None = None
    dtype: str | None = None
    costs: CostModel | None = None  # the run's fixed costs, for methods that size trees by cost

    def option(self, key: str, default: int | float | str):
        """An option converted to the type of its default; a bad value is a SpecbenchError."""
        if key not in self.options:
            return default
        raw = self.options[key]
        try:
            return type(default)(raw)
        except ValueError:
            raise SpecbenchError(f"option {key}={raw!r}: expected {type(default).__name__}") from None


# How many settings `tune` may try per method: the same grid budget for every method.
TUNING_BUDGET = 4


@dataclass(frozen=True)
class MethodInfo:
    name: str
    description: str
    lossless: bool
    build: Callable[[BuildContext], Drafter]
    # The settings `tune` tries, as option strings key=value:key=value ("" = the defaults, listed first); at most
    # TUNING_BUDGET. Empty: the method has nothing to tune.
    tuning: tuple[str, ...] = ()


def available_methods() -> dict[str, MethodInfo]:
    methods = importlib.import_module("specbench.methods")  # by name: run/ sits below the methods

    found: dict[str, MethodInfo] = {}
    for module in pkgutil.iter_modules(methods.__path__):
        for info in getattr(importlib.import_module(f"specbench.methods.{module.name}"), "METHODS", []):
            if info.name in found:
                raise RuntimeError(f"method {info.name!r} is defined twice")
            found[info.name] = info
    return dict(sorted(found.items(), key=lambda kv: (kv[0] != "vanilla", kv[0])))


def _from_methods(attribute: str) -> dict[str, Callable]:
    methods = importlib.import_module("specbench.methods")  # by name: run/ sits below the methods

    found: dict[str, Callable] = {}
    for module in pkgutil.iter_modules(methods.__path__):
        found.update(getattr(importlib.import_module(f"specbench.methods.{module.name}"), attribute, {}))
    return found


def available_trainers() -> dict[str, Callable]:
    """Training entry points: `TRAINERS` dicts in methods/*.py, {name: train(target, cache, cfg, options)}."""
    return _from_methods("TRAINERS")


def available_datastores() -> dict[str, Callable]:
    """Datastore builders: `DATASTORES` dicts in methods/*.py, {name: build(target, data, progress) -> folder}."""
    return _from_methods("DATASTORES")


def variant(base: MethodInfo, spec: str, options: dict[str, str]) -> MethodInfo:
    """The method with its own options on top of --opt: the rows of a sweep (e.g. eagle@total_tokens=8:top_k=3)."""

    def build(ctx: BuildContext) -> Drafter:
        return base.build(BuildContext(ctx.target, ctx.draft, {**ctx.options, **options}, ctx.device, ctx.dtype,
                                       ctx.costs))

    return MethodInfo(spec, f"{base.description} [{spec.partition('@')[2]}]", base.lossless, build, base.tuning)


def parse_method_options(spec: str) -> dict[str, str]:
    """The options of name@key=value:key=value ({} for a bare name)."""
    options = {}
    opts = spec.partition("@")[2]
    for pair in opts.split(":") if opts else []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SpecbenchError(f"method {spec!r}: options go as name@key=value:key=value")
        options[key] = value
    return options


def select_methods(names: list[str]) -> list[MethodInfo]:
    """Method names, each optionally with its own options: name@key=value:key=value."""
    known = available_methods()
    selected = []
    for spec in names:
        name, _, opts = spec.partition("@")
        if name not in known:
            raise SpecbenchError(f"unknown method {name}; valid: {', '.join(known)}")
        if not opts:
            selected.append(known[name])
            continue
        selected.append(variant(known[name], spec, parse_method_options(spec)))
    if len(set(names)) != len(names):
        raise SpecbenchError("a method is listed twice in --methods")
    return selected
