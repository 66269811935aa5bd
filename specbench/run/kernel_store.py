"""Where this machine's few-token kernel rules are kept (measured by specbench.run.kernel_rule), and how a run
describes its rule. Nothing here imports torch: `costs show` lists the stored rules before torch loads."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from specbench.cache import cache_root
from specbench.decode.names import PRODUCT_KERNELS, ROW_COUNTS, KernelRule

if TYPE_CHECKING:
    from specbench.decode.runtime import RuntimeInfo


def describe(rule: KernelRule) -> str:
    """e.g. "1 pair, 2-4 wxt, 5-32 packed": each run of row counts that takes one kernel."""
    spans: list[list] = []
    for low, high, kernel in zip((1,) + tuple(r + 1 for r in ROW_COUNTS), ROW_COUNTS, rule.kernels):
        if spans and spans[-1][2] == kernel:
            spans[-1][1] = high
        else:
            spans.append([low, high, kernel])
    return ", ".join(f"{low}{'' if low == high else f'-{high}'} {kernel}" for low, high, kernel in spans)


def read_rule(path: Path) -> tuple[KernelRule, str] | None:
    """A stored rule and when it was measured, or None where there is none (or it is not one)."""
    try:
        raw = json.loads(path.read_text())
        rule = KernelRule(tuple(raw["rule"]))
        fits = len(rule.kernels) == len(ROW_COUNTS) and set(rule.kernels) <= set(PRODUCT_KERNELS)
        return (rule, str(raw["measured"])) if fits else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def rule_store() -> Path:
    return cache_root() / "kernels"


def stored_rules() -> list[str]:
    """A line per rule kept on this machine (`costs show`)."""
    lines = []
    for path in sorted(rule_store().glob("*.json")):
        found = read_rule(path)
        lines.append(f"{path}: kernel rule {describe(found[0])} (measured {found[1]})" if found else
                     f"{path}: not a kernel rule (delete it: the next load measures again)")
    return lines


def store_rule(path: Path, record: dict) -> tuple[KernelRule, str]:
    """Keep a rule unless another process kept one first (its rule then wins: every process decodes on one); the
    rule kept and where it came from. A cache that cannot be written keeps nothing, and the source says why."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
            json.dump(record, f, indent=1)
        try:
            os.link(f.name, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(f.name)
    except OSError as exc:
        return KernelRule(tuple(record["rule"])), f"measured {record['measured']}, not stored ({exc})"
    rule, measured = read_rule(path) or (KernelRule(tuple(record["rule"])), record["measured"])
    return rule, f"stored {path} (measured {measured})"


def rule_record(runtime: RuntimeInfo | None) -> dict[str, str]:
    """What a run records of its kernel rule: the rule and where it came from (nothing on stock kernels)."""
    if runtime is None or not runtime.swapped_linears:
        return {}
    return {"kernel_rule": describe(runtime.rule), "kernel_rule_source": runtime.rule_source}
