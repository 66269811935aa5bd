"""`specbench check RUN_DIR`: at T=0 every lossless method must emit exactly vanilla's token ids.
`check RUN_DIR --against OTHER_RUN`: two runs of the same settings made the same decisions (compare_runs).

Where a method departs from vanilla, the target's logits at that position (on vanilla's prefix) tell float noise
from a bug: a near tie between vanilla's token and the method's can flip under a different batch shape or kernel;
a clear margin cannot. Lossy methods are reported with how far they get before they drift.
Runs at batch sizes above one: every method at every B (vanilla included) is compared with vanilla at the smallest
B of the run (B=1 when it is there), and named "method (B=b)".
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench.decode.names import Runtime
from specbench.errors import SpecbenchError
from specbench.run.record import Record
from specbench.run.records import read_records
from specbench.run.registry import REFERENCES
from specbench.run.run_info import read_run_info
from specbench.run.timing_only import LABEL, timing_only_reasons

# Largest logit gap still called a near tie, per dtype: fp32 kernels disagree by ~1e-5, half precision by ~1e-2.
NEAR_TIE = {"float32": 1e-3, "float64": 1e-6, "float16": 0.1, "bfloat16": 0.1}
TIE_ULPS = 2  # and at least this many units in the last place of the dtype at the logits' magnitude


def near_tie_threshold(dtype: str, scale: float | None) -> float:
    """The largest logit gap still called float noise: NEAR_TIE for the dtype, or TIE_ULPS units in the last place
    at the logits' magnitude where that is more (bf16 logits between 16 and 32 lie 0.125 apart, so two of them one
    step apart are as close as bf16 can tell; measured on an H200, reports/gpu-h200)."""
    floor = NEAR_TIE.get(dtype, 1e-3)
    kind = getattr(torch, dtype, None)
    if not scale or not isinstance(kind, torch.dtype) or not kind.is_floating_point:
        return floor
    return max(floor, TIE_ULPS * torch.finfo(kind).eps * 2.0 ** math.floor(math.log2(scale)))


@dataclass
class Mismatch:
    method: str
    task: str
    question_id: str
    turn: int
    index: int  # first differing position
    expected: int | None  # vanilla's token there (None: vanilla's output ended)
    got: int | None
    follows_earlier: bool = False  # an earlier turn of this question diverged already (the prompts differ)
    margin: float | None = None  # target's logit(vanilla's token) - logit(method's token) on vanilla's prefix
    scale: float | None = None  # the larger magnitude of those two logits (a low-precision dtype's step grows with it)


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _key(record: Record) -> tuple[str, str, int]:
    return record.task, str(record.question_id), record.repeat


def compare_to_vanilla(run_dir: Path) -> tuple[dict[str, tuple[int, int]], list[Mismatch], dict[str, bool]]:
    """Per method (identical turns, compared turns), the mismatches, and each method's lossless flag."""
    records = [r for r in read_records(run_dir) if r.temperature == 0.0]
    why = next((reason for r in records if (reason := timing_only_reasons(r.target, r.synthetic))), None)
    if why:
        raise SpecbenchError(f"{run_dir} is {LABEL} ({why}): check compares outputs with the target's, and a "
                             "timing-only run's are not")
    sizes = sorted({r.batch_size for r in records if r.method == "vanilla"})
    if not sizes:
        above = unchecked(run_dir)
        raise SpecbenchError(f"{run_dir}: no vanilla records at T=0 to compare with"
                             + (f" ({above}: check --sampled tests those methods)" if above else ""))
    reference = sizes[0]
    several = len({r.batch_size for r in records}) > 1 or reference != 1
    vanilla = {_key(r): r.choice.token_ids for r in records if r.method == "vanilla" and r.batch_size == reference}
    counts: dict[str, tuple[int, int]] = {}
    lossless: dict[str, bool] = {}
    mismatches: list[Mismatch] = []
    for r in records:
        if (r.method == "vanilla" and r.batch_size == reference) or _key(r) not in vanilla:
            continue
        name = f"{r.method} (B={r.batch_size})" if several else r.method
        lossless[name] = r.lossless
        same, total = counts.get(name, (0, 0))
        diverged = False
        for turn, (ref, got) in enumerate(zip(vanilla[_key(r)], r.choice.token_ids)):
            total += 1
            index = first_divergence(ref, got)
            if index is None:
                same += 1
                continue
            mismatches.append(Mismatch(
                name, r.task, str(r.question_id), turn, index,
                ref[index] if index < len(ref) else None, got[index] if index < len(got) else None, diverged))
            diverged = True
        counts[name] = (same, total)
    return counts, mismatches, lossless


def add_margins(run_dir: Path, mismatches: list[Mismatch]) -> None:
    """Fill in the target's logit margin at each first divergence (loads the run's target)."""
    from specbench.decode.target import chat_tokens
    from specbench.run.kernel_rule import load_target
    from specbench.run.tasks import resolve_questions, selection_from_settings

    todo = [m for m in mismatches if not m.follows_earlier and m.expected is not None and m.got is not None]
    if not todo:
        return
    info = read_run_info(run_dir)
    settings, device = info.settings, str(info.environment.get("device") or info.settings.get("device") or "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():  # the resolved device, not `auto`
        raise SpecbenchError(f"{run_dir} decoded on {device}: its departures' logit margins are that device's, so "
                             "check it there (or pass --no-margins)")
    target = load_target(settings["target"], settings.get("device"), settings.get("dtype"), Runtime.of(settings.get("runtime")))
    records = [r for r in read_records(run_dir) if r.method == "vanilla" and r.temperature == 0.0]
    reference = min(r.batch_size for r in records)
    vanilla = {(_key(r)[:2]): r.choice for r in records if r.batch_size == reference}
    selection = selection_from_settings(settings)
    selection.tasks = sorted({m.task for m in todo})
    questions = {task.name: {str(q.question_id): q for q in qs} for task, qs in resolve_questions(selection)}
    for m in todo:
        question, answers = questions.get(m.task, {}).get(m.question_id), vanilla[(m.task, m.question_id)]
        if question is None:
            continue
        messages: list[dict[str, str]] = []
        for turn in range(m.turn + 1):
            messages.append({"role": "user", "content": question.turns[turn]})
            if turn < m.turn:
                messages.append({"role": "assistant", "content": answers.turns[turn]})
        prefix = chat_tokens(target.tokenizer, messages) + answers.token_ids[m.turn][: m.index]
        with torch.inference_mode():
            logits = target.model(torch.tensor([prefix], device=target.model.device)).logits[0, -1].float()
        m.margin = float(logits[m.expected] - logits[m.got])
        m.scale = float(max(abs(logits[m.expected]), abs(logits[m.got])))


def _drift(mismatches: list[Mismatch], same: int, total: int) -> str:
    firsts = [m.index for m in mismatches if not m.follows_earlier]
    if not firsts:
        return ""
    return f"; where it departs, after a median of {statistics.median(firsts):g} tokens (min {min(firsts)})"


def check_run(run_dir: Path, margins: bool = True) -> tuple[str, bool]:
    """A printable summary and whether every lossless method matched vanilla everywhere."""
    counts, mismatches, lossless = compare_to_vanilla(run_dir)
    if margins and any(lossless.get(m.method, True) for m in mismatches):
        add_margins(run_dir, [m for m in mismatches if lossless.get(m.method, True)])
    dtype = read_run_info(run_dir).environment.get("dtype", "float32")
    lines, ok = [], True
    for method, (same, total) in sorted(counts.items()):
        kind = "reference" if method in REFERENCES else "lossless" if lossless[method] else "lossy"
        verdict = "OK" if same == total else ("MISMATCH" if lossless[method] else "differs (expected: lossy)")
        drift = "" if lossless[method] else _drift([m for m in mismatches if m.method == method], same, total)
        lines.append(f"{method:<20} {kind:<8} identical to vanilla in {same}/{total} turns  {verdict}{drift}")
        ok &= same == total or not lossless[method]
    for m in mismatches:
        if not lossless[m.method]:
            continue
        line = (f"  {m.method} {m.task} question {m.question_id} turn {m.turn}: first divergence at token "
                f"{m.index} (vanilla {m.expected}, {m.method} {m.got})")
        if m.follows_earlier:
            line += "; an earlier turn diverged already"
        elif m.margin is not None:
            tie = near_tie_threshold(dtype, m.scale)
            kind = "near tie: float noise possible" if abs(m.margin) <= tie else "clear margin: a bug, not noise"
            line += f"; target logit margin {m.margin:.2e} ({kind}, {dtype} tie threshold {tie:g})"
        lines.append(line)
    if not counts:
        lines.append("no methods besides vanilla at T=0")
    sampled = unchecked(run_dir)
    if sampled:
        lines.append(f"not checked: {sampled} (at T > 0 a lossless method samples its own tokens; its distribution is "
                     "tested by `python -m specbench check --sampled --methods ...`)")
    return "\n".join(lines), ok


def unchecked(run_dir: Path) -> str:
    """"12 records at T=1" for the run's records above T=0, which token identity cannot check; "" where none."""
    counts: dict[float, int] = {}
    for r in read_records(run_dir):
        if r.temperature != 0.0:
            counts[r.temperature] = counts.get(r.temperature, 0) + 1
    return ", ".join(f"{n} records at T={t:g}" for t, n in sorted(counts.items()))


def compare_runs(first_dir: Path, second_dir: Path, methods: list[str] | None = None) -> tuple[str, bool]:
    """Two runs of the same settings (one idle and one beside other work, say; or vanilla on two runtimes): per
    method and temperature, how many records have the same token ids and the same accept lengths in every turn.
    methods: only these methods' records (None: all). Timings are not compared."""
    first = {r.key(): r.choice for r in read_records(first_dir) if methods is None or r.method in methods}
    second = {r.key(): r.choice for r in read_records(second_dir) if methods is None or r.method in methods}
    shared = sorted(first.keys() & second.keys(), key=str)
    if not shared:
        raise SpecbenchError(f"{first_dir} and {second_dir} have no record in common"
                             + (f" for {', '.join(methods)}" if methods else ""))
    counts: dict[tuple[str, float], list[int]] = {}
    for key in shared:
        a, b = first[key], second[key]
        count = counts.setdefault((key[0], key[2]), [0, 0, 0])
        count[0] += 1
        count[1] += a.token_ids == b.token_ids
        count[2] += a.accept_lengths == b.accept_lengths
    lines = [f"{'method':<20} {'T':>4}  same token ids  same accept lengths"]
    for (method, temperature), (total, tokens, accepts) in sorted(counts.items()):
        lines.append(f"{method:<20} {temperature:>4g}  {tokens:>6}/{total:<7} {accepts:>8}/{total}")
    unmatched = len(first.keys() ^ second.keys())
    if unmatched:
        lines.append(f"{unmatched} records are in one run only (not compared)")
    ok = all(total == tokens == accepts for total, tokens, accepts in counts.values())
    lines.append("identical apart from timings" if ok else "DIFFERENT: the runs decided differently")
    return "\n".join(lines), ok
