"""Method discovery: every module that lists methods in `METHODS` (and trainers in `TRAINERS`, their training
objectives in `OBJECTIVES_OF`, datastore builders in `DATASTORES`) is a source of methods:
- the modules of the `specbench.methods` package (the top-level methods/ folder);
- the modules that installed packages declare in the entry-point group `specbench.methods`;
- the files given with --method-file (`method_files`), a researcher's own method without a package.
New methods appear in the CLI, records and reports this way; nothing here names a method. Nothing here imports torch
or a method's code: a method's declaration names its build with a Ref (specbench.method), so `list` answers at once.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import pkgutil
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

from specbench.errors import SpecbenchError
from specbench.method import MethodInfo, closest, join_options, parse_options

ENTRY_POINTS = "specbench.methods"  # the entry-point group of methods from other packages

# The reference rows a run can add beside its methods (`run --reference NAME`; specbench.run.reference runs them):
# transformers' own generate, not methods (nothing is drafted or verified).
COMPILED = "hf-compiled"  # the reference every report also gives each method's speedup over
REFERENCES = {
    COMPILED: "HF generate, static KV cache, forward compiled with torch.compile (generate's CompileConfig)",
    "hf-eager": "HF generate, default dynamic KV cache, no compilation",
}


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
            info.check_tuning()
            found[info.name] = info
    return dict(sorted(found.items(), key=lambda kv: (kv[0] != "vanilla", kv[0])))


def _from_methods(attribute: str, method_files: Sequence[Path] = ()) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for _, source in method_sources(method_files):
        found.update(getattr(source, attribute, {}))
    return found


def available_trainers(method_files: Sequence[Path] = ()) -> dict[str, Callable]:
    """Training entry points: `TRAINERS` dicts, {name: train(target, cache, cfg, options)}."""
    return _from_methods("TRAINERS", method_files)


def available_objectives(method_files: Sequence[Path] = ()) -> dict[str, tuple[str, ...]]:
    """Training objectives: `OBJECTIVES_OF` dicts, {trainer: the names `train TRAINER --objective NAME` takes, its
    default first}; a trainer without one takes no --objective."""
    return _from_methods("OBJECTIVES_OF", method_files)


def available_datastores() -> dict[str, Callable]:
    """Datastore builders: `DATASTORES` dicts, {name: build(target, data, progress) -> folder}."""
    return _from_methods("DATASTORES")


def select_methods(names: list[str], method_files: Sequence[Path] = (),
                   common: Mapping[str, str] | None = None) -> list[MethodInfo]:
    """The rows of a run: method names, each optionally with its own options (name@key=value:key=value), plus the
    --opt options (`common`) of the methods that declare them. Every option is checked against its method's
    declarations here, before any model loads; a row's label names every option set for it, from @ or --opt."""
    known = available_methods(method_files)
    common = dict(common or {})
    selected = []
    for spec in names:
        name = spec.partition("@")[0]
        if name not in known:
            raise SpecbenchError(f"unknown method {name}; valid: {', '.join(known)}{closest(name, list(known))}")
        info, own = known[name], parse_options(spec)
        given = {**own, **{k: v for k, v in common.items() if info.declared(k) is not None and k not in own}}
        selected.append(info.configured(join_options(name, given) if given else spec, given))
    for key in common:
        declaring = [m for m in selected if m.declared(key) is not None]
        if not declaring:
            valid = sorted({o.name for m in selected for o in m.options})
            raise SpecbenchError(f"unknown option {key} for --opt: none of {', '.join(m.base for m in selected)} "
                                 f"declares it; valid: {', '.join(valid) or 'none'}{closest(key, valid)}")
    if len({m.name for m in selected}) != len(selected):
        raise SpecbenchError("a method is listed twice in --methods")
    return selected


def check_references(names: list[str], batch_sizes: list[int]) -> None:
    """Before any model loads: known names, each once, and batch size 1 (generate decodes one prompt here)."""
    for name in names:
        if name not in REFERENCES:
            raise SpecbenchError(f"unknown reference {name}; valid: {', '.join(REFERENCES)}")
    if len(set(names)) != len(names):
        raise SpecbenchError("a reference is listed twice in --reference")
    if names and batch_sizes != [1]:
        raise SpecbenchError(f"--reference runs at batch size 1 only, not --batch-size {','.join(map(str, batch_sizes))}")
