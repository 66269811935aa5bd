"""Which runs' tables a report folder holds, read from the tables' provenance headers: `run` refuses a report folder
that holds another run's tables before it decodes anything (no pandas, no torch here)."""
from __future__ import annotations

import re
from pathlib import Path

from specbench.errors import SpecbenchError


def runs_in(out_dir: Path) -> set[str]:
    """When the runs whose tables a report folder holds were started (from the tables' provenance headers)."""
    found = set()
    for table in out_dir.glob("*.md"):
        match = re.search(r"; started (\S+?)(?:;| -->)", table.read_text(encoding="utf-8")[:4000])
        if match:
            found.add(match.group(1))
    return found


def check_report_dir(out_dir: Path, started: str | None) -> None:
    """Refuse to write a run's tables over another run's (a committed report, say); the same run, resumed, may."""
    others = runs_in(out_dir) - {started}
    if others:
        raise SpecbenchError(f"{out_dir} holds the tables of another run (started {', '.join(sorted(others))}): "
                             "pass --report-dir DIR, or remove that folder first")
