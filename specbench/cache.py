"""Where specbench keeps what it builds once per machine (stored costs, retrieval datastores)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """specbench's cache on this machine: $SPECBENCH_CACHE, else $XDG_CACHE_HOME/specbench, else ~/.cache/specbench."""
    root = os.environ.get("SPECBENCH_CACHE")
    if not root:
        root = str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specbench")
    return Path(root)
