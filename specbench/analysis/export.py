"""`specbench export RUN --format spec-bench`: answer files that Spec-Bench's evaluation/speed.py and equal.py read
unchanged, and the figures speed.py will print from them.

One JSONL per method, temperature (and repeat, as Spec-Bench's run_1, run_2 ... folders), named as Spec-Bench names
its answer files (<model>-<method>-<dtype>-temp-<T>.jsonl), sorted by question as its reorg_answer_file does.
accept_lengths is one flat list per question: the tokens each target forward emitted, the prefill's included, so
its mean is our τ.

speed.py counts differently from our headline speedup: it averages per-question tokens/s (short answers weigh
more), and it recounts the BASELINE's tokens by re-tokenizing each answer's text minus one per turn (for a BOS token
that some tokenizers, SmolLM2's among them, never add). `speed_prediction.md` applies that rule to our records with
the target's own tokenizer (saved beside the files for speed.py's --tokenizer-path) next to our two speedups.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specbench.analysis.pairs import paired_speedups
from specbench.errors import SpecbenchError
from specbench.run.record import Record
from specbench.run.records import read_records
from specbench.run.run_info import read_run_info

FORMATS = ("spec-bench",)
# speed.py's tasks, in its order; mt_bench gathers MT-bench's eight categories, the others match a category.
SPEED_TASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag", "overall")
MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


@dataclass
class AnswerFile:
    path: Path
    method: str
    temperature: float
    repeat: int
    answers: list[dict[str, Any]]
    batch_size: int = 1


def model_id(target: str, method: str, dtype: str, temperature: float, batch_size: int = 1) -> str:
    batch = f"-bs-{batch_size}" if batch_size > 1 else ""  # one answer file per batch size
    return f"{Path(target).name.lower()}-{method}-{dtype}-temp-{temperature:g}{batch}".replace("/", "_")


def _answer(record: Record, model: str, fallback_time: float) -> dict[str, Any]:
    choice = record.choice
    key = f"{record.method}/{record.task}/{record.question_id}/{record.temperature}/{record.repeat}"
    if record.batch_size > 1:
        key += f"/bs{record.batch_size}"
    return {
        "question_id": record.question_id,
        "category": record.task_category,  # speed.py selects tasks by category
        "answer_id": hashlib.sha1(key.encode()).hexdigest()[:22],  # deterministic: the same run exports the same
        "model_id": model,
        "choices": [{
            "index": 0, "turns": choice.turns, "decoding_steps": choice.decoding_steps,
            "new_tokens": choice.new_tokens, "wall_time": choice.wall_time,
            "accept_lengths": [a for turn in choice.accept_lengths for a in turn],
        }],
        "tstamp": record.tstamp or fallback_time,  # records from before tstamp was kept: the run's start
    }


def answer_files(run_dir: Path, out: Path) -> list[AnswerFile]:
    records = read_records(run_dir)
    if not records:
        raise SpecbenchError(f"{run_dir}: no finished records to export")
    info = read_run_info(run_dir)
    target = info.settings.get("target", "model")
    dtype = info.environment.get("dtype", "float32")
    started = Path(run_dir / "run.json").stat().st_mtime if (run_dir / "run.json").is_file() else 0.0
    repeats = {r.repeat for r in records}
    task_order = list(dict.fromkeys(r.task for r in records))
    groups: dict[tuple[str, float, int, int], list[Record]] = {}
    for r in records:
        groups.setdefault((r.method, r.temperature, r.repeat, r.batch_size), []).append(r)
    files = []
    for (method, temperature, repeat, batch_size), rows in sorted(groups.items()):
        # reorg_answer_file sorts by question id; our ids may repeat across tasks, so tasks stay in run order
        rows.sort(key=lambda r: (task_order.index(r.task), isinstance(r.question_id, str),
                                 r.question_id if isinstance(r.question_id, int) else str(r.question_id)))
        model = model_id(target, method, dtype, temperature, batch_size)
        folder = out / f"run_{repeat + 1}" if len(repeats) > 1 else out
        files.append(AnswerFile(folder / f"{model}.jsonl", method, temperature, repeat,
                                [_answer(r, model, started) for r in rows], batch_size))
    return files


def _in_task(answer: dict[str, Any], task: str) -> bool:
    if task == "overall":
        return True
    if task == "mt_bench":
        return answer["category"] in MT_BENCH_CATEGORIES
    return answer["category"] == task


def speed_rule(answers: list[dict[str, Any]], baseline: list[dict[str, Any]], tokenizer: Any,
               task: str) -> dict[str, float] | None:
    """What speed.py's speed() returns for one task: per-question tokens/s averaged, the baseline's tokens
    recounted from its text (len(tokenizer(turn).input_ids) - 1 per turn), τ = mean of the flat accept_lengths."""
    mine = [a for a in answers if _in_task(a, task)]
    base = [a for a in baseline if _in_task(a, task)]
    if not mine or not base:
        return None
    speeds = [sum(a["choices"][0]["new_tokens"]) / sum(a["choices"][0]["wall_time"]) for a in mine]
    accepts = [x for a in mine for x in a["choices"][0]["accept_lengths"]]
    base_speeds = [sum(len(tokenizer(turn).input_ids) - 1 for turn in a["choices"][0]["turns"])
                   / sum(a["choices"][0]["wall_time"]) for a in base]
    return {"tau": float(np.mean(accepts)), "tokens_per_second": float(np.mean(speeds)),
            "baseline_tokens_per_second": float(np.mean(base_speeds)),
            "speedup": float(np.mean(speeds) / np.mean(base_speeds))}


def ours(answers: list[dict[str, Any]], baseline: list[dict[str, Any]], task: str) -> dict[str, float]:
    """Our headline speedup (total tokens / total time against vanilla's) and our Spec-Bench-style one
    (per-question means, vanilla's own token counts), as the report computes them: over the questions both files
    answered (specbench.analysis.pairs.paired_speedups)."""
    rows = [{"method": name, "task": task, "question_id": str(a["question_id"]),
             "turns": len(a["choices"][0]["new_tokens"]), "new_tokens": sum(a["choices"][0]["new_tokens"]),
             "wall_time": sum(a["choices"][0]["wall_time"])}
            for name, group in (("method", answers), ("vanilla", baseline)) for a in group if _in_task(a, task)]
    frame = pd.DataFrame(rows)
    return {"speedup_total": float(paired_speedups(frame)[0][("method", task)]),
            "speedup_per_question": float(paired_speedups(frame, per_question_means=True)[0][("method", task)])}


def export_spec_bench(run_dir: Path, out: Path) -> str:
    """Write the answer files, the tokenizer and speed_prediction.md/.json; return the printable prediction."""
    from specbench.decode.target import load_tokenizer

    files = answer_files(run_dir, out)
    target = read_run_info(run_dir).settings.get("target")
    tokenizer = load_tokenizer(target) if target else None
    for f in files:
        f.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(a, ensure_ascii=False) + "\n" for a in f.answers), encoding="utf-8")
        tmp.replace(f.path)
    lines = ["Spec-Bench answer files (evaluation/speed.py, evaluation/equal.py read them unchanged):"]
    lines += [f"  {f.path}" for f in files]
    if tokenizer is None:
        return "\n".join(lines)
    tokenizer.save_pretrained(out / "tokenizer")
    lines.append(f"tokenizer for speed.py's --tokenizer-path: {out / 'tokenizer'}")
    rows = []
    for f in files:
        base = next((b for b in files if b.method == "vanilla" and b.temperature == f.temperature
                     and b.repeat == f.repeat and b.batch_size == f.batch_size), None)
        if base is None or f.method == "vanilla":
            continue
        for task in SPEED_TASKS:
            rule = speed_rule(f.answers, base.answers, tokenizer, task)
            if rule is not None:
                rows.append({"method": f.method, "temperature": f.temperature, "repeat": f.repeat,
                             "batch_size": f.batch_size, "task": task,
                             "file": str(f.path), "baseline_file": str(base.path), **rule,
                             **ours(f.answers, base.answers, task)})
    (out / "speed_prediction.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    table = ["| method | T | repeat | B | task | τ | speed.py speedup | our speedup (total) | our speedup (per question) |",
             "|---|---|---|---|---|---|---|---|---|"]
    table += [f"| {r['method']} | {r['temperature']:g} | {r['repeat'] + 1} | {r['batch_size']} | {r['task']} | {r['tau']:.4f} | "
              f"{r['speedup']:.4f}x | {r['speedup_total']:.4f}x | {r['speedup_per_question']:.4f}x |" for r in rows]
    (out / "speed_prediction.md").write_text(
        "What evaluation/speed.py prints for each answer file against vanilla's (its counting rule applied to our "
        "records), beside our speedups over the same answers.\n\n" + "\n".join(table) + "\n", encoding="utf-8")
    if not rows:
        lines.append("(no vanilla answers at a method's temperature: speed.py has no baseline file to compare with)")
    return "\n".join([*lines, "", *table])


def export_run(run_dir: Path, fmt: str, out: Path) -> str:
    if fmt not in FORMATS:
        raise SpecbenchError(f"unknown export format {fmt!r}; valid: {', '.join(FORMATS)}")
    if not (run_dir / "records.jsonl").is_file():
        raise SpecbenchError(f"{run_dir}: no records.jsonl (not a specbench run directory)")
    return export_spec_bench(run_dir, out)
