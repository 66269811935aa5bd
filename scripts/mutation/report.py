"""Writes the mutation pass's report from a cosmic-ray session: reports/mutation/README.md and mutants.csv.

Each surviving mutant must be explained in equivalent.yaml (module, the unmutated source line, the mutated lines, and
why no test can tell them from the real code); the exit status is 1 when one is not.

Usage: python scripts/mutation/report.py SESSION.sqlite [--out reports/mutation] [--seconds N]
"""
from __future__ import annotations

import argparse
import csv
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pandas as pd
import yaml
from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome
from hand_mutants import first_failure, test_command

from specbench.decode.costs import cpu_description

HERE = Path(__file__).resolve().parent


@dataclass
class Mutant:
    job: str
    module: str
    line: int
    definition: str
    operator: str
    source: str  # the unmutated line, stripped
    mutated: str  # the mutated line, stripped
    outcome: str  # killed, survived, skipped: <why>
    killed_by: str
    equivalent: str  # why a survivor is equivalent, from equivalent.yaml


def _mutated_line(diff: str | None) -> str:
    plus = [line[1:].strip() for line in (diff or "").splitlines() if line.startswith("+") and not line.startswith("+++")]
    return " / ".join(plus)


def _killed_by(output: str | None) -> str:
    if output == "timeout":
        return "timeout"
    found = first_failure(output or "")
    if found and "::" not in found:
        return f"{found} (the module failed to import)"
    return found or ("exit status" if output else "")


def load(session: str, explained: list[dict]) -> list[Mutant]:
    lines: dict[str, list[str]] = {}
    mutants = []
    with use_db(session, WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            (m,) = item.mutations
            module = str(m.module_path)
            source = lines.setdefault(module, Path(module).read_text().splitlines())[m.start_pos[0] - 1].strip()
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                outcome = "skipped: " + (result.output or "").removeprefix("skipped: ")
            elif result.test_outcome == TestOutcome.SURVIVED:
                outcome = "survived"
            else:
                outcome = "killed"
            mutated = _mutated_line(result.diff)
            why = next((e["why"] for e in explained if e["module"] == module and e["line"].strip() == source
                        and mutated in [t.strip() for t in e["mutants"]]), "") if outcome == "survived" else ""
            mutants.append(Mutant(item.job_id, module, m.start_pos[0], m.definition_name or "", m.operator_name,
                                  source, mutated, outcome, _killed_by(result.output) if outcome == "killed" else "",
                                  why))
        pending = db.num_work_items - db.num_results
    if pending:
        sys.exit(f"report.py: error: {pending} mutants have not run yet (cosmic-ray exec)")
    return mutants


def machine() -> str:
    return f"{cpu_description()}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}"


def write(mutants: list[Mutant], out: Path, seconds: int | None) -> int:
    out.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame([m.__dict__ for m in mutants]).sort_values(["module", "line", "operator", "job"])
    frame.to_csv(out / "mutants.csv", index=False, quoting=csv.QUOTE_MINIMAL)
    frame["status"] = frame.outcome.where(frame.outcome != "survived",
                                         frame.equivalent.map(lambda w: "survived, equivalent" if w
                                                              else "survived, NOT equivalent"))
    counts = frame.pivot_table(index="module", columns="status", values="job", aggfunc="count", fill_value=0)
    counts.loc["all"] = counts.sum()
    counts.insert(0, "mutants", counts.sum(axis=1))
    survivors = frame[frame.outcome == "survived"]
    unexplained = survivors[survivors.equivalent == ""]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    tests = test_command()
    killers = frame[frame.outcome == "killed"].killed_by.str.replace(r"\[.*", "[...]", regex=True).value_counts()
    text = [
        "# Mutation pass: verification and sampling",
        "",
        f"`bash scripts/mutation/run.sh` at commit {commit}, cosmic-ray {version('cosmic-ray')}, "
        f"{machine()}" + (f", {seconds / 60:.0f} minutes" if seconds else "") + ".",
        "",
        "Every mutant of `specbench/decode/verify.py`, `specbench/decode/sampling.py` and the engine's emission rule "
        "(`engine.emitted_tokens`: the bonus token, the budget cut and the stop rule) ran against the focused tests:",
        f"`{tests}`. Mutants inside type annotations (strings under `from __future__ import annotations`) and in "
        "the rest of engine.py are skipped by `scripts/mutation/filter.py`.",
        "",
        counts.reset_index().to_markdown(index=False),
        "",
        f"**Surviving mutants not explained as equivalent: {len(unexplained)}.**",
        "",
        "## Survivors judged equivalent",
        "",
        "Each is listed in `scripts/mutation/equivalent.yaml` with its reason.",
        "",
        survivors[["module", "line", "source", "mutated", "equivalent"]].rename(
            columns={"source": "code", "mutated": "mutant", "equivalent": "why no test can tell"}).to_markdown(
            index=False) if len(survivors) else "None.",
        "",
        "## Which test killed them (the first failure under `pytest -x`)",
        "",
        killers.rename_axis("test").reset_index(name="mutants").to_markdown(index=False),
        "",
        "Every mutant, with its line and outcome: `mutants.csv`.",
        "",
        "Mistakes cosmic-ray's operators cannot write (a dropped renormalisation, q not carried to the next sibling, "
        "the bonus from the wrong row) are applied by `python scripts/mutation/hand_mutants.py`: `hand_mutants.md` "
        "(against the focused tests) and `hand_mutants_distribution_tests.md` (against the model-based distribution "
        "tests alone, which let some through).",
    ]
    if len(unexplained):
        text += ["", "## NOT equivalent: these need a test", "",
                 unexplained[["module", "line", "source", "mutated"]].to_markdown(index=False)]
    (out / "README.md").write_text("\n".join(text) + "\n")
    print((out / "README.md").read_text())
    return 1 if len(unexplained) else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("session")
    parser.add_argument("--out", type=Path, default=Path("reports/mutation"))
    parser.add_argument("--seconds", type=int, default=None)
    args = parser.parse_args()
    explained = yaml.safe_load((HERE / "equivalent.yaml").read_text()) or []
    sys.exit(write(load(args.session, explained), args.out, args.seconds))


if __name__ == "__main__":
    main()
