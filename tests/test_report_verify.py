"""Reports that prove themselves: every committed report folder names the committed run it was made from
(made_from.json), and `report --verify` remakes its tables from those records with the current code and finds
them identical; an edited record makes it fail. (After a change of the table code: scripts/figures/remake_reports.sh.)"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from specbench.analysis.verify import MADE_FROM, read_made_from, verify_report
from specbench.cli import main

ROOT = Path(__file__).resolve().parents[1]


def committed(pattern: str) -> list[Path]:
    """The committed files matching a git pathspec (a checkout's own reports, not a user's uncommitted ones)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", pattern], cwd=ROOT, capture_output=True, check=False)
    return sorted(ROOT / name for name in listed.stdout.decode().split("\0") if name)


REPORTS = [path.parent for path in committed("reports/**/made_from.json")]
# A folder of `report` tables (every report writes a speedup or throughput table), except the retired ones: tables
# whose records were never committed, kept as history (reports/retired/README.md).
TABLE_FOLDERS = sorted({p.parent for pattern in ("reports/**/speedup_T*.md", "reports/**/throughput_T*.md")
                        for p in committed(pattern)} - {p.parent for p in committed("reports/retired/**")})


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout: the committed reports are not known")
def test_the_committed_reports_are_found():
    # A parametrization over nothing would pass everything: the fair comparison's folders must be among them.
    assert ROOT / "reports/fair/T0" in REPORTS and ROOT / "reports/fair/4m-T1" in REPORTS


def test_every_report_folder_names_its_committed_records():
    missing = [str(folder.relative_to(ROOT)) for folder in TABLE_FOLDERS if folder not in REPORTS]
    assert not missing, f"report folders without {MADE_FROM} (regenerate them or retire them): {missing}"
    for folder in REPORTS:
        prov = read_made_from(folder)
        assert committed(f"{(prov.root / prov.run / 'records.jsonl').relative_to(ROOT)}"), prov.run


@pytest.mark.parametrize("folder", REPORTS, ids=[str(f.relative_to(ROOT / "reports")) for f in REPORTS])
def test_report_remakes_identically(folder):
    assert verify_report(folder) == []


def small_report(tmp_path: Path) -> Path:
    """A copy of the smallest committed report and its run, laid out as in the repository."""
    source = ROOT / "reports/gpu-h200/identity-bfloat16"
    prov = read_made_from(source)
    shutil.copytree(prov.root / prov.run, tmp_path / prov.run)
    folder = tmp_path / source.relative_to(ROOT)
    shutil.copytree(source, folder)
    return folder


def test_report_names_its_run_and_verify_fails_on_an_edited_record(tmp_path, capsys, monkeypatch):
    folder = small_report(tmp_path)
    run = read_made_from(folder).run
    (folder / MADE_FROM).unlink()
    monkeypatch.chdir(tmp_path)  # as `report` is run from the repository's root
    assert main(["report", run, "--out", str(folder.relative_to(tmp_path)), "--no-plots"]) == 0
    written = json.loads((folder / MADE_FROM).read_text(encoding="utf-8"))
    assert (written["root"], written["run"]) == ("../../..", run)
    assert main(["report", "--verify", str(folder)]) == 0

    records = tmp_path / run / "records.jsonl"
    lines = records.read_text(encoding="utf-8").splitlines()
    edited = json.loads(lines[1])
    edited["choices"][0]["wall_time"][0] *= 1.5  # one method's first turn took longer
    lines[1] = json.dumps(edited)
    records.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "speedup_T9.md").write_text("a table the records do not make\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["report", "--verify", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "speedup_T0.md: line " in out and "committed" in out and "remade" in out
    assert "speedup_T9.md: committed, but the records no longer make it" in out
    # --fix writes the remade tables and removes the stale one; then the folder verifies again
    assert main(["report", "--verify", "--fix", str(folder)]) == 0
    assert not (folder / "speedup_T9.md").exists()
    assert main(["report", "--verify", str(folder)]) == 0


def test_an_also_file_is_compared(tmp_path, capsys):
    folder = small_report(tmp_path)
    made_from = json.loads((folder / MADE_FROM).read_text(encoding="utf-8"))
    made_from["also"] = {"check.txt": ["python -m specbench check {run} --no-margins"]}
    (folder / MADE_FROM).write_text(json.dumps(made_from), encoding="utf-8")
    (folder / "check.txt").write_text("every method identical\n", encoding="utf-8")
    assert main(["report", "--verify", str(folder)]) == 1
    assert "check.txt: line 1: committed 'every method identical'" in capsys.readouterr().out


def test_a_folder_without_provenance_is_one_error_line(tmp_path, capsys):
    assert main(["report", "--verify", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specbench: error: ") and MADE_FROM in err and len(err.strip().splitlines()) == 1
