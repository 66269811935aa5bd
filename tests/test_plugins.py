"""Methods from outside the package: a file given with --method-file and a module an installed package declares in
the `specbench.methods` entry-point group appear in `list`, run end to end with drafts accepted, and are checked
and reported like built-in methods."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specbench.cli import main
from specbench.run.records import read_records
from specbench.run.registry import available_methods
from tests.test_cli import bad_input

PLUGIN = Path(__file__).parent / "plugin" / "bigram_method.py"


def accepted_drafts(out: Path, method: str) -> int:
    return sum(a - 1 for r in read_records(out) if r.method == method for turn in r.choice.accept_lengths for a in turn)


def test_method_file_runs_end_to_end(tiny_target_dir, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", "--target", str(tiny_target_dir), "--out", str(out), "--report-dir", str(out / "report"),
                 "--method-file", str(PLUGIN), "--methods", "vanilla,bigram", "--tasks", "gsm8k,alpaca",
                 "--limit", "2", "--max-new-tokens", "24", "--temperatures", "0"]) == 0
    assert accepted_drafts(out, "bigram") >= 4, "the plugin's drafts were never accepted"
    capsys.readouterr()
    assert main(["check", str(out), "--no-margins"]) == 0
    assert "bigram" in capsys.readouterr().out
    assert "bigram" in (out / "report" / "budget.md").read_text()
    assert main(["list", "--method-file", str(PLUGIN)]) == 0
    assert "bigram" in capsys.readouterr().out
    assert "bigram" not in available_methods()  # nothing global: without the file it is unknown


def test_entry_point_of_an_installed_package(tiny_target_dir, tmp_path):
    """A package installed into its own site folder (a dist-info with entry_points.txt) and put on PYTHONPATH."""
    site = tmp_path / "site"
    (site / "bigram_plugin").mkdir(parents=True)
    (site / "bigram_plugin" / "__init__.py").write_text(PLUGIN.read_text())
    info = site / "bigram_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bigram-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[specbench.methods]\nbigram = bigram_plugin\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    listing = subprocess.run([sys.executable, "-m", "specbench", "list"], capture_output=True, text=True, env=env)
    assert listing.returncode == 0 and "bigram" in listing.stdout
    out = tmp_path / "r"
    run = subprocess.run([sys.executable, "-m", "specbench", "run", "--target", str(tiny_target_dir), "--out", str(out),
                          "--report-dir", str(out / "report"), "--methods", "bigram", "--tasks", "gsm8k", "--limit",
                          "2", "--max-new-tokens", "24", "--temperatures", "0"], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert accepted_drafts(out, "bigram") >= 2


@pytest.mark.parametrize("content,message", [
    ("raise ValueError('broken on purpose')", "failed to load: ValueError: broken on purpose"),
    ("METHODS = ['not a method']", "METHODS must list MethodInfo objects"),
])
def test_a_bad_method_file_is_one_line(tiny_target_dir, tmp_path, capsys, content, message):
    bad = tmp_path / "bad.py"
    bad.write_text(content)
    line = bad_input(capsys, ["list", "--method-file", str(bad)])
    assert message in line
    line = bad_input(capsys, ["run", "--target", str(tiny_target_dir), "--out", str(tmp_path / "r"),
                              "--method-file", str(tmp_path / "missing.py"), "--methods", "pld"])
    assert "no such file" in line and not (tmp_path / "r").exists()
