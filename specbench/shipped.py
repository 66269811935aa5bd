"""Where drafters trained for packaged targets ship (heads/<method>/<target>/, installed as the package data of
specbench.heads) and which folder a DEFAULT file names: read by the trained methods (methods/common/shipped.py) and
by `doctor`, which checks that every shipped drafter can be found."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from specbench.decode.model_files import PACKAGED_MODELS


def shipped_drafters(method: str) -> Path:
    """heads/<method>/ of the repository, installed as the package data of specbench.heads (so a non-editable
    install finds them too)."""
    return Path(str(resources.files("specbench.heads"))) / method


def shipped_folder(method: str, target: str, within: str | Path = "") -> Path | None:
    """heads/<method>/<target>/<within> when the target is a packaged short name and a drafter (config.json) ships
    there; None otherwise (a folder or HF id as the target has no shipped drafters). Without `within`, the folder
    that heads/<method>/<target>/DEFAULT names (the one the wheel carries: setup.py reads the same file)."""
    name = target.lower()
    if name not in PACKAGED_MODELS:
        return None
    base = shipped_drafters(method) / name
    if not within and (base / "DEFAULT").is_file():
        within = (base / "DEFAULT").read_text(encoding="utf-8").strip()
    folder = base / within
    return folder if (folder / "config.json").is_file() else None
