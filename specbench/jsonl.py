"""Reading JSON Lines files that people write (question files, training prompts): one value a line."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from specbench.errors import SpecbenchError


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line; an invalid line is one SpecbenchError naming path:line."""
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                raise SpecbenchError(f"{path}:{number}: invalid JSON ({exc.msg})") from None
