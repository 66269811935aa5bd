"""Method discovery: every module that lists methods in `METHODS` (and trainers in `TRAINERS`, datastore builders in
`DATASTORES`) is a source of methods:
- the modules of the `specbench.methods` package (the top-level methods/ folder);
- the modules that installed packages declare in the entry-point group `specbench.methods`;
- the files given with --method-file (`method_files`), a researcher's own method without a package.
New methods appear in the CLI, records and reports this way; nothing here names a method.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

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


ENTRY_POINTS = "specbench.methods"  # the entry-point group of methods from other packages


def method_file(path: Path) -> ModuleType:
    """A Python file that defines METHODS (and optionally TRAINERS), loaded as a module of its own."""
    if not path.is_file():
        raise SpecbenchError(f"--method-file {path}: no such file")
    spec = importlib.util.spec_from_file_location(f"specbench_method_file_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise SpecbenchError(f"--method-file {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - a researcher's file: its error, in one line
        raise SpecbenchError(f"--method-file {path} failed to load: {type(exc).__name__}: {exc}") from None
    return module


def method_sources(method_files: Sequence[Path] = ()) -> list[tuple[str, Any]]:
    """(where, module or METHODS-holding object) for every source of methods, built-in first."""
    package = importlib.import_module("specbench.methods")  # by name: run/ sits below the methods
    sources: list[tuple[str, Any]] = [
        (f"specbench.methods.{m.name}", importlib.import_module(f"specbench.methods.{m.name}"))
        for m in pkgutil.iter_modules(package.__path__)
    ]
    for entry in importlib.metadata.entry_points(group=ENTRY_POINTS):
        try:
            sources.append((f"entry point {entry.name} ({entry.value})", entry.load()))
        except Exception as exc:  # noqa: BLE001 - another package's module: its error, in one line
            raise SpecbenchError(f"the {ENTRY_POINTS} entry point {entry.name} ({entry.value}) failed to load: "
                                 f"{type(exc).__name__}: {exc}") from None
    sources += [(str(path), method_file(Path(path))) for path in method_files]
    return sources


def available_methods(method_files: Sequence[Path] = ()) -> dict[str, MethodInfo]:
    found: dict[str, MethodInfo] = {}
    for where, source in method_sources(method_files):
        for info in source if isinstance(source, (list, tuple)) else getattr(source, "METHODS", []):
            if not isinstance(info, MethodInfo):
                raise SpecbenchError(f"{where}: METHODS must list MethodInfo objects, not {type(info).__name__}")
            if info.name in found:
                raise SpecbenchError(f"method {info.name!r} is defined twice (again in {where})")
            found[info.name] = info
    return dict(sorted(found.items(), key=lambda kv: (kv[0] != "vanilla", kv[0])))


def _from_methods(attribute: str, method_files: Sequence[Path] = ()) -> dict[str, Callable]:
    found: dict[str, Callable] = {}
    for _, source in method_sources(method_files):
        found.update(getattr(source, attribute, {}))
    return found


def available_trainers(method_files: Sequence[Path] = ()) -> dict[str, Callable]:
    """Training entry points: `TRAINERS` dicts, {name: train(target, cache, cfg, options)}."""
    return _from_methods("TRAINERS", method_files)


def available_datastores() -> dict[str, Callable]:
    """Datastore builders: `DATASTORES` dicts, {name: build(target, data, progress) -> folder}."""
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


def select_methods(names: list[str], method_files: Sequence[Path] = ()) -> list[MethodInfo]:
    """Method names, each optionally with its own options: name@key=value:key=value."""
    known = available_methods(method_files)
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
