"""Marks the mutants that cannot change behaviour by construction as skipped, before `cosmic-ray exec` runs:
- mutants inside type annotations (every mutated module has `from __future__ import annotations`, so annotations are
  strings that nothing evaluates);
- mutants of engine.py outside the functions the pass covers (SCOPE below: the emission rule, i.e. the bonus token
  and the stop rule; the rest of the engine is covered by the token-identity tests, not by this pass).

Usage: python scripts/mutation/filter.py SESSION.sqlite
"""
from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import WorkerOutcome, WorkResult

SCOPE = {"specbench/decode/engine.py": {"emitted_tokens"}}  # modules mutated only in these functions


@cache
def annotation_spans(path: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    spans = []
    for node in ast.walk(ast.parse(Path(path).read_text())):
        annotations = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            annotations = [a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg,
                                                  args.kwarg] if a is not None and a.annotation is not None]
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations = [node.annotation]
        spans += [((a.lineno, a.col_offset), (a.end_lineno, a.end_col_offset)) for a in annotations if a is not None]
    return spans


def why_skipped(mutation) -> str | None:
    path = str(mutation.module_path)
    start = tuple(mutation.start_pos)
    if any(lo <= start < hi for lo, hi in annotation_spans(path)):
        return "annotation"
    if path in SCOPE and mutation.definition_name not in SCOPE[path]:
        return "out of scope"
    return None


def main(session: str) -> None:
    skipped = 0
    with use_db(session, WorkDB.Mode.open) as db:
        for item in db.work_items:
            reasons = {why_skipped(m) for m in item.mutations}
            if None not in reasons:
                db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED,
                                                      output="skipped: " + ", ".join(sorted(reasons))))
                skipped += 1
    print(f"{skipped} mutants skipped (annotations, or outside {SCOPE})")


if __name__ == "__main__":
    main(sys.argv[1])
