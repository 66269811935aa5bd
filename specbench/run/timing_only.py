"""TIMING-ONLY runs: those whose outputs are not their target's (synthetic acceptance, specbench.run.synthetic)
or whose target is not a trained model (a shape target with random weights, specbench.decode.shapes). Their
timings are what they measure; `check`, `tune` and the fair comparison refuse them, and every table says so."""
from __future__ import annotations

from typing import Any

from specbench.decode.shapes import is_shape
from specbench.run.synthetic import LABEL


def timing_only(target: str, synthetic: list[float] | None) -> str | None:
    """Why a run (or record) is TIMING-ONLY, in words after the label; None for an ordinary run."""
    why = timing_only_reasons(target, synthetic)
    return f"{LABEL}: {why}" if why else None


def timing_only_reasons(target: str, synthetic: list[float] | None) -> str | None:
    """What makes a run (or record) TIMING-ONLY, without the label; None for an ordinary run."""
    reasons = []
    if synthetic:
        reasons.append(f"synthetic acceptance at rates {','.join(f'{r:g}' for r in synthetic)}, not the target's "
                       "verification")
    if is_shape(target):
        reasons.append(f"{target} has random weights" + (
            "" if synthetic else " (without --synthetic-acceptance only vanilla's timing means anything)"))
    return "; ".join(reasons) or None


def run_timing_only(settings: dict[str, Any]) -> str | None:
    """timing_only of a run from its settings (run.json); a replayed profile's categories are named."""
    label = timing_only(str(settings.get("target", "")), settings.get("synthetic"))
    categories = settings.get("synthetic_categories")
    if label and categories:
        label += (f" (a replayed acceptance profile: those rates overall, its own for {', '.join(sorted(categories))}; "
                  "each record carries its rates)")
    return label
