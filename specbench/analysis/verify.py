"""`specbench report --verify DIR`: a committed report folder remade from the records it names, and compared with
what is committed; `--fix` writes the remade files over the committed ones (after a change of the table code).

`report` writes made_from.json into every report folder it makes:

    {"root": "../..", "run": "reports/fair/run-T0", "out": "reports/fair/T0",
     "command": "python -m specbench report reports/fair/run-T0 --out reports/fair/T0",
     "also": {"check.txt": ["python -m specbench check {run}"], "paired_tau.txt": ["python scripts/paired_tau.py ..."]}}

root: the folder the commands ran in (the repository), relative to the report folder; run and out: relative to root;
options (where the report had any, e.g. --slo-tpot-ms): passed again when the tables are remade;
also (optional, kept when `report` rewrites the file): other files of the folder made from the same records, each
the standard output of its commands one after another, run in root, `{run}` standing for the run folder.

Verification runs `python -m specbench report RUN --out TMP --no-plots` in root (the same code and options as the
committed tables, minus the plots) and every `also` command, then compares the text of every table (.md, .tex, .csv)
and every `also` file line by line. Plots are not compared: their files hold dates. budget.md also reads the drafter
folders the run names (their train.json and log.jsonl): where one is not on this machine it is not compared (a note).
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from specbench.analysis.budget import repository_path
from specbench.errors import SpecbenchError
from specbench.run.run_info import read_run_info

MADE_FROM = "made_from.json"
TABLE_SUFFIXES = (".md", ".tex", ".csv")
NOT_TABLES = {"README.md"}


@dataclass
class Provenance:
    folder: Path  # the report folder
    root: Path  # where the commands run
    run: str  # the run folder, relative to root
    also: dict[str, list[str]] = field(default_factory=dict)
    options: list[str] = field(default_factory=list)  # the report's own options (e.g. --slo-tpot-ms 50)


def write_made_from(run_dir: Path, out_dir: Path, options: list[str] | None = None,
                    timing_only: str | None = None) -> None:
    """Name the run folder a report was made from (relative paths, so the repository may move) and the options it
    was made with (and, for a TIMING-ONLY run, why it is: every file of its report says so); keep `also`."""
    root = Path.cwd()
    path = out_dir / MADE_FROM
    also = json.loads(path.read_text(encoding="utf-8")).get("also", {}) if path.is_file() else {}
    run = Path(os.path.relpath(run_dir.resolve(), root)).as_posix()
    out = Path(os.path.relpath(out_dir.resolve(), root)).as_posix()
    data = {"root": Path(os.path.relpath(root, out_dir.resolve())).as_posix(), "run": run, "out": out,
            "command": f"python -m specbench report {shlex.quote(run)} --out {shlex.quote(out)}"
                       + "".join(f" {shlex.quote(o)}" for o in options or [])}
    if options:
        data["options"] = list(options)
    if also:
        data["also"] = also
    if timing_only:
        data["timing_only"] = timing_only
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def read_made_from(folder: Path) -> Provenance:
    path = folder / MADE_FROM
    if not path.is_file():
        raise SpecbenchError(f"{folder}: no {MADE_FROM}, so the records it was made from are not named "
                             "(remake it with `python -m specbench report RUN --out DIR`)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        prov = Provenance(folder, (folder / data["root"]).resolve(), str(data["run"]), dict(data.get("also", {})),
                          [str(o) for o in data.get("options", [])])
    except (ValueError, KeyError, TypeError) as exc:
        raise SpecbenchError(f"{path}: not a made_from file ({exc})") from None
    if not (prov.root / prov.run / "records.jsonl").is_file():
        raise SpecbenchError(f"{folder}: its run folder {prov.run} has no records.jsonl (records not committed?)")
    return prov


def _python(argv: list[str]) -> list[str]:
    return [sys.executable, *argv[1:]] if argv and argv[0] in ("python", "python3") else argv


def _output(prov: Provenance, commands: list[str]) -> str:
    """The standard output of the commands, one after another, in root (`check` exits 1 on a difference: kept)."""
    text = []
    for command in commands:
        argv = _python(shlex.split(command.replace("{run}", shlex.quote(prov.run))))
        done = subprocess.run(argv, cwd=prov.root, capture_output=True, text=True, check=False)
        if done.returncode not in (0, 1) or (done.returncode and not done.stdout):
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise SpecbenchError(f"{prov.folder}: `{command}` failed (exit {done.returncode}): {last}")
        text.append(done.stdout)
    return "".join(text)


def remake(prov: Provenance, dest: Path, plots: bool = False) -> dict[str, str]:
    """Write the report's tables into dest; return the `also` files' remade text by name."""
    argv = [sys.executable, "-m", "specbench", "report", prov.run, "--out", str(dest.resolve()), *prov.options]
    done = subprocess.run(argv + ([] if plots else ["--no-plots"]), cwd=prov.root, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SpecbenchError(f"{prov.folder}: remaking its tables failed (exit {done.returncode}): {last}")
    return {name: _output(prov, commands) for name, commands in prov.also.items()}


def absent_drafters(prov: Provenance) -> list[str]:
    """The drafter folders the run names that are neither in this checkout (heads/...) nor elsewhere on this machine
    (budget.md cannot be remade without them)."""
    info = read_run_info(prov.root / prov.run)
    named = {folder for worker in info.workers for folder in (worker.get("trained_from") or {}).values()}
    return sorted(folder for folder in named if not (prov.root / repository_path(folder, prov.root)).is_dir())


def _tables(prov: Provenance, folder: Path) -> set[str]:
    """The report's table files in a folder (budget.md only where this machine has the drafters it reads)."""
    skip = NOT_TABLES | set(prov.also) | ({"budget.md"} if absent_drafters(prov) else set())
    return {p.name for p in folder.iterdir() if p.suffix in TABLE_SUFFIXES and p.name not in skip}


def first_difference(committed: str, remade: str) -> str | None:
    """Where two texts first differ, as `line N: committed ... / remade ...`; None when they are equal."""
    if committed == remade:
        return None
    old, new = committed.splitlines(), remade.splitlines()
    for number, (a, b) in enumerate(zip(old, new), start=1):
        if a != b:
            return f"line {number}: committed {a[:120]!r} / remade {b[:120]!r}"
    shorter = "committed" if len(old) < len(new) else "remade"
    return f"line {min(len(old), len(new)) + 1}: the {shorter} file ends there"


def compare(prov: Provenance, remade_dir: Path, also: dict[str, str]) -> list[str]:
    """One line per file that differs between the committed folder and its remake."""
    lines = []
    remade, committed = _tables(prov, remade_dir), _tables(prov, prov.folder)
    for name in sorted(committed | remade):
        if name not in remade:
            lines.append(f"{prov.folder / name}: committed, but the records no longer make it")
        elif name not in committed:
            lines.append(f"{prov.folder / name}: made from the records, but not committed")
        else:
            where = first_difference((prov.folder / name).read_text(encoding="utf-8"),
                                     (remade_dir / name).read_text(encoding="utf-8"))
            if where:
                lines.append(f"{prov.folder / name}: {where}")
    for name, text in sorted(also.items()):
        path = prov.folder / name
        where = first_difference(path.read_text(encoding="utf-8"), text) if path.is_file() else "not committed"
        if where:
            lines.append(f"{path}: {where}")
    return lines


def verify_report(folder: Path) -> list[str]:
    """The differences between a committed report folder and its remake from the records it names ([] = none)."""
    prov = read_made_from(folder)
    with tempfile.TemporaryDirectory(prefix="specbench-verify-") as tmp:
        return compare(prov, Path(tmp), remake(prov, Path(tmp)))


def fix_report(folder: Path) -> list[str]:
    """Write the remade tables and `also` files over the committed ones (plots untouched); what changed."""
    prov = read_made_from(folder)
    with tempfile.TemporaryDirectory(prefix="specbench-verify-") as tmp:
        also = remake(prov, Path(tmp))
        changed = compare(prov, Path(tmp), also)
        remade = _tables(prov, Path(tmp))
        for name in _tables(prov, folder) - remade:  # tables the current code no longer makes
            (folder / name).unlink()
        for name in remade:
            shutil.copyfile(Path(tmp) / name, folder / name)
    for name, text in also.items():
        (folder / name).write_text(text, encoding="utf-8")
    return changed


def verify_command(folder: Path, fix: bool = False) -> int:
    """`report --verify DIR [--fix]`: print one line per differing file; 1 when any differs (before a fix), else 0."""
    differences = fix_report(folder) if fix else verify_report(folder)
    for line in differences:
        print(line)
    if fix:
        print(f"{folder}: remade from {read_made_from(folder).run}" + (f" ({len(differences)} files changed)"
                                                                       if differences else " (no change)"))
        return 0
    absent = absent_drafters(read_made_from(folder))
    if absent:
        print(f"{folder}: budget.md not compared: the drafter folders {', '.join(absent)} are not on this machine")
    if not differences:
        print(f"{folder}: every table remade from {read_made_from(folder).run} is identical")
    return 1 if differences else 0
