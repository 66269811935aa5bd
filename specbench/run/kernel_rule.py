"""The few-token kernels' rule (specbench.decode.names.KernelRule) measured on this machine, once, before anything
is decoded. Which product kernel is fastest at a row count depends on the CPU: the one-row kernel fastest on a 2-core
AMD EPYC is the slowest on an Intel Xeon (reports/cpu-kernels-intel), so a rule measured on one machine is not
another's default. A kernel replaces F.linear (transformers' own) at a row count only where it is faster by more
than MARGIN, in the fastest of interleaved rounds over all the target's swapped products.

The rule is stored per machine (specbench.run.kernel_store: its CPU, torch, the products' shapes and dtype; not the
thread count, so that a run the load made decode on fewer threads keeps the idle run's kernels), and the first one
stored is reused by every later run, process and command, so a loaded and an idle run decode on the same kernels
and give the same token ids. A measurement during which other processes used more than BUSY_SHARE of the CPUs is
made again (ATTEMPTS in all); a last one still beside load is stored saying so. Every run records its rule and where
it came from (delete the stored file to measure again). The rule decides which kernel computes a product, never
what is drafted; nothing here runs while decoding.
"""
from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import torch
from tqdm import tqdm

from specbench.cache import cache_root
from specbench.decode.costs import cpu_description
from specbench.decode.names import PRODUCT_KERNELS, ROW_COUNTS, KernelRule, Runtime
from specbench.decode.runtime import FewTokenLinear, fastest_seconds
from specbench.decode.target import LoadedModel, load_model
from specbench.run.kernel_store import read_rule, rule_store, store_rule
from specbench.run.load import BUSY_SHARE, LoadMeter

UNPACKED = "unpacked"  # cache_root()/unpacked: GGUF targets unpacked once per machine (decode.target.load_model)
MARGIN = 0.1  # a kernel replaces F.linear only where it is faster by more than this
ROUNDS = 3  # interleaved (ascending row counts, then descending); each cell is its fastest over the rounds
REPEATS = 2  # timed calls per cell and round, after one untimed
ATTEMPTS = 3  # measurements while other processes used more than BUSY_SHARE of the CPUs, before the last is kept


def candidates(rows: int, packed: bool) -> list[str]:
    return [k for k in PRODUCT_KERNELS if (k != "pair" or rows == 1) and (k != "packed" or packed)]


def choose(ms: dict[str, float]) -> str:
    """The fastest kernel of one row count's times, F.linear unless another beats it by more than MARGIN."""
    fastest = min(ms, key=lambda k: ms[k])
    return "linear" if ms["linear"] <= ms[fastest] * (1 + MARGIN) else fastest


def swapped(model: torch.nn.Module) -> list[FewTokenLinear]:
    return [m for m in model.modules() if isinstance(m, FewTokenLinear)]


def measure_rule(model: torch.nn.Module, rounds: int = ROUNDS) -> tuple[KernelRule, dict[str, list[float | None]]]:
    """The rule for this model's swapped products on this machine, and its table: per kernel, ms per ROW_COUNTS
    (None where the kernel does not apply)."""
    linears = swapped(model)
    packed = all(m.packed is not None for m in linears)
    best: dict[tuple[str, int], float] = {}
    bar = tqdm(total=rounds * len(ROW_COUNTS), desc="few-token kernels (measured once on this machine)",
               unit="size", file=sys.stderr, leave=False)
    with torch.inference_mode(), bar:
        for r in range(rounds):
            for rows in ROW_COUNTS if r % 2 == 0 else ROW_COUNTS[::-1]:
                inputs = [torch.randn(rows, m.in_features, dtype=m.weight.dtype, device=m.weight.device)
                          for m in linears]
                for kernel in candidates(rows, packed):
                    seconds = fastest_seconds(lambda: [m.product(x, kernel) for m, x in zip(linears, inputs)],
                                              linears[0].weight.device, REPEATS)
                    best[kernel, rows] = min(best.get((kernel, rows), seconds), seconds)
                bar.update()
    rule = KernelRule(tuple(choose({k: best[k, rows] for k in candidates(rows, packed)}) for rows in ROW_COUNTS))
    table = {k: [round(best[k, r] * 1000, 3) if (k, r) in best else None for r in ROW_COUNTS] for k in PRODUCT_KERNELS}
    return rule, table


def rule_path(model: torch.nn.Module) -> Path:
    """Where this machine's rule for these products is kept: cache_root()/kernels/<digest of what it is for>.json."""
    linears = swapped(model)
    key = {"cpu": cpu_description(), "torch": torch.__version__, "dtype": str(linears[0].weight.dtype),
           "shapes": sorted({(m.in_features, m.out_features) for m in linears})}
    return rule_store() / f"{hashlib.sha1(json.dumps(key).encode()).hexdigest()[:16]}.json"


def machine_rule(model: torch.nn.Module) -> tuple[KernelRule, str]:
    """This machine's rule for the model's swapped products (stored, or measured now) and where it came from."""
    path = rule_path(model)
    found = read_rule(path)
    if found:
        return found[0], f"stored {path} (measured {found[1]})"
    for _ in range(ATTEMPTS):
        meter = LoadMeter()
        rule, table = measure_rule(model)
        busy = meter.other_share(wait=True) or 0.0
        if busy <= BUSY_SHARE:
            break
    measured = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if busy > BUSY_SHARE:
        measured += f", beside other processes using {busy:.0%} of the CPUs"
    record = {"rule": list(rule.kernels), "row_counts": list(ROW_COUNTS), "ms": table, "measured": measured,
              "margin": MARGIN, "cpu": cpu_description(), "threads": torch.get_num_threads()}
    return store_rule(path, record)


def load_target(name: str, device: str | None = None, dtype: str | None = None,
                runtime: Runtime | str = "auto") -> LoadedModel:
    """A model ready to decode (specbench.decode.target.load_model), its few-token kernels on this machine's rule; a
    GGUF target's unpacked weights are kept in specbench's cache (cache_root()/unpacked) for later loads."""
    target = load_model(name, device, dtype, runtime, unpacked=cache_root() / UNPACKED)
    if target.runtime is None or not target.runtime.swapped_linears:
        return target
    rule, source = machine_rule(target.model)
    linears = swapped(target.model)
    for m in linears:
        m.rule, m.packed = rule, m.packed if "packed" in rule.kernels else None
    target.runtime = replace(target.runtime, rule=rule, rule_source=source,
                             packed_linears=sum(m.packed is not None for m in linears))
    return target
