"""Checked prose (issue 64): every figure quoted in the README, docs/results.md and each report's README is found in a
table cell, text output or record field its block names (specbench/analysis/prose.py); an edited figure, a figure
without a source, and a source that no longer holds the figure all fail."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specbench.analysis.prose import blocks_of, check_page, figures_in, results_pages
from specbench.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = results_pages(ROOT)


def test_the_results_pages_are_found():
    # A parametrization over nothing would pass everything.
    names = {str(page.relative_to(ROOT)) for page in PAGES}
    assert {"README.md", "docs/results.md", "reports/fair/README.md", "reports/gpu-h200/README.md",
            "reports/gpu-h200/runtime-1/README.md"} <= names and "reports/retired/retrieval/README.md" not in names


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_quoted_figure_has_its_source(page):
    assert check_page(page) == []


def test_the_pages_quote_figures():
    # The check must have something to check: the README's one-screen results (its leaderboard), and the pages the
    # details live on, docs/results.md and the fair report, quote many figures.
    for name, least in (("README.md", 25), ("docs/results.md", 50), ("reports/fair/README.md", 50)):
        assert sum(len(block.figures) for block in blocks_of(ROOT / name)) > least, name


def test_what_counts_as_a_figure():
    texts = [f.text for f in figures_in("samd 1.35× (τ 2.10), 10 questions, T=1, ratio=0.2, torch 2.13.0, 59 s, "
                                         "95% interval, 49%, `--limit 0.5`, [x](a/1.5.md), llama-3.2-1b, -0.014", 1)]
    assert texts == ["1.35×", "2.10", "59 s", "49%", "0.014"]


def page_with(tmp_path: Path, prose: str, table: str = "| pld | 1.23× ± 0.10 | 1.68 |\n") -> Path:
    (tmp_path / "T0").mkdir()
    (tmp_path / "T0" / "speedup_T0.md").write_text(table, encoding="utf-8")
    page = tmp_path / "README.md"
    page.write_text(prose, encoding="utf-8")
    return page


def test_a_figure_found_in_its_source_passes(tmp_path):
    page = page_with(tmp_path, "Intro, no figures.\n\n<!-- src: T0/speedup_T0.md -->\npld 1.23× (τ 1.68), ± 0.10.\n")
    assert check_page(page) == []


def test_an_edited_figure_fails_and_names_its_source(tmp_path):
    page = page_with(tmp_path, "<!-- src: T0/speedup_T0.md -->\npld 1.24× (τ 1.68).\n")
    [error] = check_page(page)
    assert "'1.24×'" in error and "T0/speedup_T0.md" in error and "README.md:2" in error


def test_a_figure_that_moved_in_its_table_fails(tmp_path):
    # The prose is right for the table it was written from; the table is remade and the figure moves.
    page = page_with(tmp_path, "<!-- src: T0/speedup_T0.md -->\npld 1.23×.\n", table="| pld | 1.19× ± 0.10 |\n")
    assert len(check_page(page)) == 1


def test_a_figure_without_a_source_fails(tmp_path):
    page = page_with(tmp_path, "<!-- src: T0/speedup_T0.md -->\npld 1.23×.\n\nIt took 59 s.\n")
    [error] = check_page(page)
    assert "'59 s' has no source" in error


def test_a_missing_source_fails(tmp_path):
    page = page_with(tmp_path, "<!-- src: T0/gone.md -->\npld 1.23×.\n")
    errors = check_page(page)
    assert any("does not exist" in e for e in errors) and any("'1.23×'" in e for e in errors)


def test_records_percent_and_constants(tmp_path):
    (tmp_path / "run.json").write_text('{"load": [{"max_share": 0.651}], "costs": {"verify_ms": [28.3082]}}')
    page = tmp_path / "README.md"
    page.write_text("<!-- src: run.json; const: 3.2 -->\nLlama 3.2: up to 65% busy, T(1) 28.3 ms.\n")
    assert check_page(page) == []
    page.write_text("<!-- src: run.json -->\nLlama 3.2: up to 66% busy.\n")
    assert len(check_page(page)) == 2


def test_code_blocks_check_outputs_and_comments_not_commands(tmp_path):
    page = tmp_path / "README.md"
    page.write_text("```bash\npython -m specbench run --limit 2.5 \\\n    --rate 0.8   # about 15 minutes\n```\n\n"
                    "```\nours_vanilla / hf_greedy = 1.601x\n```\n")
    assert [e.split("'")[1] for e in check_page(page)] == ["15 minutes", "1.601x"]


def test_the_command_checks_a_page_and_a_checkout(tmp_path, capsys):
    page = page_with(tmp_path, "<!-- src: T0/speedup_T0.md -->\npld 1.23×.\n")
    assert main(["report", "--check-prose", str(page)]) == 0
    page.write_text("<!-- src: T0/speedup_T0.md -->\npld 1.25×.\n", encoding="utf-8")
    assert main(["report", "--check-prose", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "'1.25×' is in none of its sources" in out and "1 pages, 1 figures, 1 without a source" in out


def test_the_command_refuses_a_missing_path(tmp_path, capsys):
    assert main(["report", "--check-prose", str(tmp_path / "nothing")]) != 0
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.skipif(not (ROOT / "reports/fair/T0").is_dir(), reason="the fair report is not in this checkout")
def test_editing_a_committed_figure_fails(tmp_path):
    folder = tmp_path / "reports" / "fair"
    shutil.copytree(ROOT / "reports/fair", folder)
    (tmp_path / "heads").symlink_to(ROOT / "heads")  # the heads' training logs it quotes
    (tmp_path / "reports" / "profile-replay-new").symlink_to(ROOT / "reports/profile-replay-new")  # its replay table
    page = folder / "README.md"
    assert check_page(page) == []
    text = page.read_text(encoding="utf-8")
    assert "| samd (defaults) | 1.35× |" in text
    page.write_text(text.replace("| samd (defaults) | 1.35× |", "| samd (defaults) | 1.53× |"), encoding="utf-8")
    [error] = check_page(page)
    assert "'1.53×'" in error and "speedup_T0.md" in error


def test_a_ratio_must_be_a_ratio_of_its_source(tmp_path):
    # 1.68 is pld's τ in the table, not a speedup: written as 1.68× it has no source.
    page = page_with(tmp_path, "<!-- src: T0/speedup_T0.md -->\npld 1.68×.\n")
    [error] = check_page(page)
    assert "'1.68×'" in error


def test_a_section_source_covers_its_section_only(tmp_path):
    page = page_with(tmp_path, "## A\n<!-- src-section: T0/speedup_T0.md -->\n\npld 1.23×.\n\nτ 1.68.\n\n"
                               "## B\n\npld 1.23×.\n")
    [error] = check_page(page)
    assert "README.md:10:" in error and "has no source" in error


def test_a_figure_is_checked_in_the_row_it_names(tmp_path):
    # The case: rest's speedup moves from 1.00x to 0.99x; "rest 1.00×" must not pass on vanilla's 1.00×.
    table = "| vanilla | 1.00× | 1.00 |\n| rest@max_tokens=4 | 0.99× ± 0.03 | 1.20 |\n"
    page = page_with(tmp_path, "<!-- src: T0/speedup_T0.md -->\nrest 1.00×, vanilla's 1.00×.\n", table=table)
    [error] = check_page(page)
    assert "'1.00×'" in error and ":2:" in error
    page.write_text("<!-- src: T0/speedup_T0.md -->\nrest 0.99× ± 0.03 (τ 1.20), against vanilla's 1.00×.\n")
    assert check_page(page) == []
