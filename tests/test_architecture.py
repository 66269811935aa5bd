"""The layers a newcomer sees, checked from the source's own imports (every import statement, function-level ones
included): no import circles; the decode core imports only itself and specbench.errors; nothing below the methods
imports a method; a method imports no other method (shared parts live in methods/common); no file is too long."""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 350
# Where each folder's modules live in the installed package (pyproject's package-dir).
FOLDERS = {"specbench": "specbench", "methods": "specbench.methods"}


def modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def imported(path: Path, name: str, known: set[str]) -> set[str]:
    """The specbench modules a file imports: `from a.b import c` counts a.b.c when that is a module, else a.b."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known and m != name}


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    found = modules()
    g = nx.DiGraph()
    for name, path in found.items():
        g.add_node(name)
        g.add_edges_from((name, other) for other in imported(path, name, set(found)))
    return g


def test_the_graph_sees_the_layers(graph):
    # A check that reads nothing would pass everything: the known edges must be there.
    assert graph.has_edge("specbench.decode.engine", "specbench.decode.verify")
    assert graph.has_edge("specbench.methods.eagle.drafter", "specbench.methods.common.feature_tree")
    assert graph.has_edge("specbench.run.runner", "specbench.run.distributed")


def test_no_import_circles(graph):
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert circles == []


def test_decode_core_imports_only_itself(graph):
    allowed = ("specbench.decode", "specbench.errors")
    upward = [(a, b) for a, b in graph.edges if a.startswith("specbench.decode") and not b.startswith(allowed)]
    assert upward == []


def test_nothing_below_the_methods_imports_a_method(graph):
    into_methods = [(a, b) for a, b in graph.edges
                    if not a.startswith("specbench.methods") and b.startswith("specbench.methods")]
    assert into_methods == []


def test_a_method_imports_no_other_method(graph):
    def method(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[:2] == ["specbench", "methods"] and parts[2] != "common" else None

    crossing = [(a, b) for a, b in graph.edges if method(a) and method(b) and method(a) != method(b)]
    assert crossing == []


def test_no_source_file_is_too_long():
    long = {str(p.relative_to(ROOT)): n for p in modules().values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_the_method_contract_sits_on_the_core(graph):
    # specbench.method is what a method imports: it may lean on the decode core only.
    assert graph.has_edge("specbench.methods.pld", "specbench.method")
    upward = [b for b in graph.successors("specbench.method") if not b.startswith(("specbench.decode", "specbench.errors"))]
    assert upward == []


def test_methods_import_nothing_from_run_or_analysis(graph):
    above = ("specbench.run", "specbench.analysis", "specbench.measure", "specbench.cli", "specbench.api")
    reaching = [(a, b) for a, b in graph.edges if a.startswith("specbench.methods") and b.startswith(above)]
    assert reaching == []


# What decodes or loads a model: the record-reading half (specbench.analysis) imports none of it. export may load a
# tokenizer (for Spec-Bench's speed.py), which is no model.
MODEL_CODE = ("torch", "transformers", "specbench.decode.engine", "specbench.run.decoder", "specbench.run.runner",
              "specbench.run.answer", "specbench.measure", "specbench.train")


def test_the_record_reading_half_loads_no_model():
    found = []
    for name, path in modules().items():
        if not name.startswith("specbench.analysis"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            imported_names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
            found += [(name, m) for m in names if m.startswith(MODEL_CODE)]
            found += [(name, n) for n in imported_names if n == "load_model"]
    assert found == []


def test_no_function_is_too_long():
    long = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                long[f"{name}.{node.name}"] = node.end_lineno - node.lineno + 1
    assert long == {}
