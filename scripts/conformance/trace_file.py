"""How every conformance trace is written (stdlib only: imported by the reference scripts in their own venvs)."""
from __future__ import annotations

import json
from pathlib import Path


def write_trace(path: Path, trace: dict, one_line: tuple[str, ...] = ("runs",)) -> None:
    """The trace as indented JSON, with each item of the lists named in one_line (the runs, ...) on a line of its
    own and those lists last, so that a remade trace diffs line by line."""
    body = json.dumps({k: v for k, v in trace.items() if k not in one_line}, indent=1)[:-2]
    for key in one_line:
        items = ",\n".join(json.dumps(item, separators=(",", ":")) for item in trace[key])
        body += f',\n "{key}": [\n{items}\n ]'
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body + "\n}\n")
