"""`specbench check`: at T=0 every lossless method must emit exactly vanilla's token ids."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.records import read_records


@dataclass
class Mismatch:
    method: str
    task: str
    question_id: str
    turn: int
    index: int  # first differing position
    expected: int | None  # vanilla's token there (None: vanilla's output ended)
    got: int | None


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare_to_vanilla(run_dir: Path) -> tuple[dict[str, tuple[int, int]], list[Mismatch], dict[str, bool]]:
    """Per method (identical turns, compared turns), the mismatches, and each method's lossless flag."""
    records = [r for r in read_records(run_dir) if float(r["temperature"]) == 0.0]
    vanilla = {(r["task"], str(r["question_id"])): r["choices"][0]["token_ids"] for r in records if r["method"] == "vanilla"}
    if not vanilla:
        raise SpecbenchError(f"{run_dir}: no vanilla records at T=0 to compare with")
    counts: dict[str, tuple[int, int]] = {}
    lossless: dict[str, bool] = {}
    mismatches: list[Mismatch] = []
    for r in records:
        if r["method"] == "vanilla":
            continue
        key = (r["task"], str(r["question_id"]))
        if key not in vanilla:
            continue
        lossless[r["method"]] = r.get("lossless", True)
        same, total = counts.get(r["method"], (0, 0))
        for turn, (ref, got) in enumerate(zip(vanilla[key], r["choices"][0]["token_ids"])):
            total += 1
            index = first_divergence(ref, got)
            if index is None:
                same += 1
                continue
            mismatches.append(Mismatch(
                r["method"], r["task"], str(r["question_id"]), turn, index,
                ref[index] if index < len(ref) else None, got[index] if index < len(got) else None))
        counts[r["method"]] = (same, total)
    return counts, mismatches, lossless


def check_run(run_dir: Path) -> tuple[str, bool]:
    """A printable summary and whether every lossless method matched vanilla everywhere."""
    counts, mismatches, lossless = compare_to_vanilla(run_dir)
    lines, ok = [], True
    for method, (same, total) in sorted(counts.items()):
        kind = "lossless" if lossless[method] else "lossy"
        verdict = "OK" if same == total else ("MISMATCH" if lossless[method] else "differs (expected: lossy)")
        lines.append(f"{method:<20} {kind:<8} identical to vanilla in {same}/{total} turns  {verdict}")
        ok &= same == total or not lossless[method]
    for m in mismatches:
        lines.append(f"  {m.method} {m.task} question {m.question_id} turn {m.turn}: first divergence at token "
                     f"{m.index} (vanilla {m.expected}, {m.method} {m.got})")
    if not counts:
        lines.append("no methods besides vanilla at T=0")
    return "\n".join(lines), ok
