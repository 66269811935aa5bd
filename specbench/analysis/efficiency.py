"""How close each method's target forwards come to the memory roofline, and what a token costs in energy.

Roofline (as gpt-fast prints it): a decoding forward must read every weight once and every row's cached keys and
values (specbench.run.footprint: sizes recorded in run.json when the run started). Per method, over its decoding
forwards (each turn's first forward, the prefill, left out: it is compute-bound):
    GB/forward = bytes those forwards must read / their number,
    GB/s = those bytes / their measured time (the records' verify_time minus prefill_time: forward, verification and
    cache compaction, so an upper bound on the forward's own time and a lower bound on its bandwidth),
    % of copy = GB/s / the device's copy bandwidth (run.json's costs: the fastest copy of a large tensor, bytes
    read + written), the limit a forward that only streams memory could reach.
The context of a row's forward at step s of a turn = its prompt + the tokens emitted in steps before s - 1 (the
last emitted token is the forward's input, not yet cached). At batch size above one a forward reads the weights
once and every active row's cache.
Records from before schema 4 (no prompt lengths, no prefill times) give no table.
Energy: J/token = the joules the device counter read over the turns (prefill and drafting included; at batch size
above one, the batch's) / the tokens they emitted; "n/a" with the reason where no counter was readable.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.analysis.tables import labelled_rows
from specbench.analysis.turns import turn_groups
from specbench.run.footprint import TargetBytes
from specbench.run.record import Record
from specbench.run.run_info import RunInfo

COLUMNS = ["decode forwards", "MB/forward", "ms/forward", "GB/s", "% of copy", "J/token"]


def forward_contexts(prompt: int, accepted: list[int]) -> list[int]:
    """The cached context each decoding forward of a turn attends to (step 1 on; step 0 is the prefill)."""
    emitted = np.cumsum(accepted)
    return [int(prompt + emitted[s - 1] - 1) for s in range(1, len(accepted))]


def group_bytes(pairs: list[tuple[Record, int]], facts: TargetBytes) -> int:
    """Bytes the decoding forwards of one generate call must read (rows leave the batch as they finish)."""
    rows = [forward_contexts(r.choice.prompt_tokens[t], r.choice.accept_lengths[t]) for r, t in pairs]
    steps = max((len(row) for row in rows), default=0)
    return sum(facts.forward_bytes([row[s] for row in rows if s < len(row)]) for s in range(steps))


def efficiency_frame(records: list[Record], facts: TargetBytes | None) -> pd.DataFrame:
    """One row per generate call of records from schema 4 on (earlier ones have no prompt lengths): method,
    lossless, task, temperature, batch_size, forwards (decoding only), bytes (NaN without the run's target sizes)
    and seconds of those forwards, tokens, joules (NaN without a counter)."""
    rows = []
    for (method, task, temperature, size, *_), pairs in turn_groups(records).items():
        first, turn = pairs[0]
        if not all(len(r.choice.prompt_tokens) > t and len(r.choice.prefill_time) > t for r, t in pairs):
            continue  # records from before schema 4
        energy = first.choice.energy_j
        rows.append({
            "method": method, "lossless": first.lossless, "task": task, "temperature": temperature,
            "batch_size": size, "forwards": max(max(len(r.choice.accept_lengths[t]) - 1, 0) for r, t in pairs),
            "bytes": group_bytes(pairs, facts) if facts else np.nan,
            "seconds": max(r.choice.verify_time[t] - r.choice.prefill_time[t] for r, t in pairs),
            "tokens": sum(r.choice.new_tokens[t] for r, t in pairs),
            "joules": energy[turn] if energy is not None and len(energy) > turn else np.nan,
        })
    return pd.DataFrame(rows, columns=["method", "lossless", "task", "temperature", "batch_size", "forwards",
                                       "bytes", "seconds", "tokens", "joules"])


def efficiency_table(frame: pd.DataFrame, copy_gbps: float | None) -> pd.DataFrame:
    """Rows = methods (method_order, (lossy) labelled), COLUMNS; NaN where a value cannot be computed."""
    table = {}
    for method, part in frame.groupby("method", sort=False):
        measured = part.dropna(subset=["bytes"])
        counted = part.dropna(subset=["joules"])
        forwards = part["forwards"].sum()
        gbps = measured["bytes"].sum() / measured["seconds"].sum() / 1e9 if measured["seconds"].sum() > 0 else np.nan
        table[method] = [
            part["forwards"].sum(),
            measured["bytes"].sum() / measured["forwards"].sum() / 1e6 if measured["forwards"].sum() else np.nan,
            1e3 * part["seconds"].sum() / forwards if forwards else np.nan,
            gbps, 100 * gbps / copy_gbps if copy_gbps else np.nan,
            counted["joules"].sum() / counted["tokens"].sum() if counted["tokens"].sum() else np.nan,
        ]
    out = pd.DataFrame.from_dict(table, orient="index", columns=COLUMNS)
    return labelled_rows(out, frame)


def run_facts(info: RunInfo) -> tuple[TargetBytes | None, float | None]:
    """The target's sizes (run.json's environment, else a worker's) and the device's copy bandwidth."""
    envs = [info.environment, *(w.get("environment") or {} for w in info.workers)]
    facts = next((TargetBytes.from_dict(e["target_bytes"]) for e in envs if e.get("target_bytes")), None)
    gbps = (info.costs or {}).get("copy_gbps")
    return facts, float(gbps) if gbps else None


def efficiency_notes(info: RunInfo, frame: pd.DataFrame) -> str:
    """What the table's limits are, and why a column is n/a where it is."""
    facts, gbps = run_facts(info)
    notes = [f"Copy bandwidth of this device: {gbps:.1f} GB/s (fastest copy of a 256 MiB tensor, bytes read + "
             "written)." if gbps else "Copy bandwidth n/a: the run's costs were measured before the copy probe."]
    if facts is None:
        notes.append("Bytes n/a: the run recorded no target sizes (made before the roofline existed).")
    else:
        notes.append(f"Target weights {facts.weights / 1e6:.1f} MB, keys and values "
                     f"{sum(g.layers * g.bytes_per_token for g in facts.kv) / 1e3:.1f} kB per cached token.")
    env = info.environment
    if frame["joules"].notna().any():
        notes.append(f"Energy: {env.get('energy_counter', 'a device counter')}, the whole device (anything else "
                     "running on it counts too).")
    else:
        notes.append(f"J/token n/a: {env.get('energy_unavailable') or 'the run recorded no energy'}.")
    return " ".join(notes)


DIGITS = {"decode forwards": 0, "MB/forward": 1, "ms/forward": 2, "GB/s": 2, "% of copy": 1, "J/token": 3}


def formatted(table: pd.DataFrame, digits: dict[str, int]) -> pd.DataFrame:
    """The table's index as columns, its cells as text: each column's digits, "n/a" where there is no value."""
    flat = table.reset_index()
    return pd.DataFrame({c: [v if c in table.index.names else "n/a" if pd.isna(v) else f"{v:.{digits.get(c, 2)}f}"
                             for v in flat[c]] for c in flat.columns})
