"""How a trained method finds the folder it loads (where drafters ship: specbench.shipped)."""
from __future__ import annotations

from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.method import BuildContext
from specbench.shipped import shipped_folder


def trained_folder(ctx: BuildContext, method: str, what: str, trainer: str, within: str | Path = "") -> Path:
    """The folder a trained method loads: method@head=FOLDER (heads side by side in one run), else --draft, else the
    one shipped for the target; one line saying what to do when there is none."""
    chosen = ctx.chosen_folder()
    if chosen:
        return chosen
    folder = shipped_folder(method, ctx.target.name, within)
    if folder is None:
        raise SpecbenchError(f"no trained {what} ships for target {ctx.target.name!r}: pass --draft FOLDER, or "
                             f"train one with python -m specbench train {trainer}")
    return folder
