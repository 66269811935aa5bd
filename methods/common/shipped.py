"""Where drafters trained for packaged targets ship, and how a trained method finds the folder it loads."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from specbench.decode.target import PACKAGED_MODELS
from specbench.errors import SpecbenchError
from specbench.method import BuildContext, Option

# The option of every trained method: which trained drafter to load (heads side by side in one run).
HEAD = Option("head", None, "folder of the trained drafter to load (default: --draft, else the one shipped for the "
              "target)")


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


def trained_folder(ctx: BuildContext, method: str, what: str, trainer: str, within: str | Path = "") -> Path:
    """The folder a trained method loads: method@head=FOLDER (heads side by side in one run), else --draft, else the
    one shipped for the target; one line saying what to do when there is none."""
    chosen = ctx.option("head") or ctx.draft
    if chosen:
        return Path(chosen)
    folder = shipped_folder(method, ctx.target.name, within)
    if folder is None:
        raise SpecbenchError(f"no trained {what} ships for target {ctx.target.name!r}: pass --draft FOLDER, or "
                             f"train one with python -m specbench train {trainer}")
    return folder
