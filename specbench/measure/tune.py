"""`specbench tune`: one tuning rule for every method. Each method declares the settings it may try
(MethodInfo.tuning, at most TUNING_BUDGET); tune decodes every one of them, beside vanilla, on the same
development split (the last N questions of each task, which a run with the settings may not evaluate), with the
run's fixed cost model, and keeps per method and temperature the setting with the highest mean speedup over the
tasks. The clock is read only here, before the run: the settings file fixes every choice the run then makes."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from specbench.analysis.tables import per_question_frame, speedup_table
from specbench.errors import SpecbenchError
from specbench.method import TUNING_BUDGET, join_options, parse_options
from specbench.run.plan import RunConfig, validate
from specbench.run.records import command_line, read_records
from specbench.run.registry import select_methods
from specbench.run.run_info import read_run_info
from specbench.run.runner import run
from specbench.run.settings import TunedSettings, tuned_as
from specbench.run.timing_only import LABEL, timing_only_reasons


@dataclass
class TuneConfig:
    run: RunConfig  # the decoding of every candidate: its out folder, dev questions (questions.tail), target ...
    settings_file: Path


def candidates(methods: list[str], method_files: Sequence[Path] = (),
               common: dict[str, str] | None = None) -> dict[str, list[tuple[str, str]]]:
    """Per method, (declared setting, spec decoded) pairs: its declared settings (the defaults first; checked against
    its declared options by the registry) on top of the options the method was given (name@head=FOLDER or --opt:
    fixed for every setting tried, never a tuned knob; a variant such as pld@rule=hf is tuned under its own key,
    settings.tuned_as). Every option is checked before anything is decoded."""
    out: dict[str, list[tuple[str, str]]] = {}
    for info in select_methods(methods, method_files, common):
        spec, name, fixed = info.name, info.base, dict(info.given)
        tuned_keys = {k for option in info.tuning for k in parse_options(f"x@{option}")}
        if set(fixed) & tuned_keys:
            raise SpecbenchError(f"{spec}: {', '.join(sorted(set(fixed) & tuned_keys))} is what tune chooses; give "
                                 "only fixed options (such as head=FOLDER)")
        key = tuned_as(name, fixed)
        if key in out:
            raise SpecbenchError(f"tune: {key} is listed twice")
        out[key] = [(o, join_options(name, {**fixed, **parse_options(f"x@{o}")})) for o in info.tuning or ("",)]
    return out


def tune(cfg: TuneConfig) -> TunedSettings:
    if not cfg.run.questions.tail:
        raise SpecbenchError("tune decodes a development split: give --dev-questions N")
    why = timing_only_reasons(cfg.run.target, cfg.run.synthetic)
    if why:
        raise SpecbenchError(f"tune chooses settings for the fair comparison, which a {LABEL} run ({why}) cannot "
                             "inform")
    specs = candidates([m for m in cfg.run.methods if m.partition("@")[0] != "vanilla"], cfg.run.method_files,
                       cfg.run.options)
    decode = replace(cfg.run, methods=["vanilla"] + [s for group in specs.values() for _, s in group], baseline=True,
                     options={})
    _, selected = validate(decode)
    run(decode)
    frame = per_question_frame(read_records(decode.out))
    chosen: dict[str, dict[str, str]] = {}
    tried: dict[str, dict[str, list[dict]]] = {}
    for temperature in decode.temperatures:
        table = speedup_table(frame[frame["temperature"] == temperature])
        table.index = [label.removesuffix(" (lossy)") for label in table.index]
        key = str(float(temperature))
        chosen[key], tried[key] = {}, {}
        for method, group in specs.items():
            rows = [{"options": option, "decoded_as": spec,
                     "speedup": round(float(table.loc[spec, ("Mean", "Speedup")]), 4),
                     "tau": round(float(table.loc[spec, ("Mean", "τ")]), 4)} for option, spec in group]
            tried[key][method] = rows
            chosen[key][method] = max(rows, key=lambda r: r["speedup"])["options"]  # ties: the first, the defaults
    info = read_run_info(decode.out)
    env = {**info.environment, "cpu": (info.costs or {}).get("cpu")}
    settings = TunedSettings(
        target=decode.target, chosen=chosen,
        dev_questions={name: [str(q.question_id) for q in qs] for name, (_, qs) in selected.items()},
        max_new_tokens=decode.max_new_tokens, command=command_line(),
        machine={k: env.get(k) for k in ("cpu", "processor", "cpu_count", "torch_threads", "device", "dtype", "cuda_device")},
        budget={"settings_per_method": TUNING_BUDGET, "questions_per_task": decode.questions.tail},
        candidates=tried)
    cfg.settings_file.parent.mkdir(parents=True, exist_ok=True)
    cfg.settings_file.write_text(settings.to_yaml(), encoding="utf-8")
    return settings


def summary(settings: TunedSettings) -> str:
    """One Markdown table per temperature: every candidate's mean speedup and τ, the chosen one in bold."""
    lines = []
    for temperature, methods in settings.candidates.items():
        lines += [f"T={float(temperature):g}", "", "| method | setting | speedup | τ |", "|---|---|---|---|"]
        for method, rows in methods.items():
            for r in rows:
                mark = "**" if r["options"] == settings.chosen[temperature][method] else ""
                lines.append(f"| {method} | {mark}{r['options'] or '(defaults)'}{mark} | {r['speedup']:.3f} | "
                             f"{r['tau']:.2f} |")
        lines.append("")
    return "\n".join(lines)
