"""Declared method options: a misspelled or bad option is one line before any model loads (run, --opt, tune, plugin
methods), every record and run.json carry the options a method really ran with, and budget.md shows --opt settings."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbench.cli import main
from specbench.decode.draft import parse_tree
from specbench.errors import SpecbenchError
from specbench.method import BuildContext, MethodInfo, Option
from specbench.run.registry import available_methods, select_methods

PLUGIN = Path(__file__).parent / "plugin" / "bigram_method.py"
NO_TARGET = "/nonexistent/target"  # an option error must come before the target is even looked for


def one_error(capsys, args: list[str]) -> str:
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("specbench: error:")]
    assert len(errors) == 1 and err[-1] == errors[0], err
    return errors[0]


def test_a_misspelled_method_option_is_refused_with_the_closest_match(capsys, tmp_path):
    error = one_error(capsys, ["run", "--methods", "vanilla,eagle@total_token=8", "--target", NO_TARGET,
                               "--out", str(tmp_path / "r")])
    assert error == ("specbench: error: unknown option total_token for eagle; valid: head, draft_vocab, top_k, depth, "
                     "total_tokens, preset; did you mean total_tokens?")
    assert not (tmp_path / "r").exists()


def test_a_misspelled_opt_is_refused(capsys, tmp_path):
    error = one_error(capsys, ["run", "--methods", "vanilla,sps", "--opt", "gama=2", "--target", NO_TARGET,
                               "--out", str(tmp_path / "r")])
    assert "unknown option gama for --opt" in error and "did you mean gamma?" in error


@pytest.mark.parametrize("spec, expected", [
    ("eagle@top_k=0", "option top_k=0 for eagle: expected int >= 1"),
    ("eagle@total_tokens=many", "option total_tokens=many for eagle: expected int >= 1 or auto"),
    ("suffix@scope=forever", "option scope=forever for suffix: expected one of run, generation"),
    ("suffix@factor=nan", "option factor=nan for suffix: expected float >= 0"),
    ("vanilla@gamma=2", "unknown option gamma for vanilla; valid: none (it takes no options)"),
])
def test_a_bad_value_is_refused(capsys, tmp_path, spec, expected):
    error = one_error(capsys, ["run", "--methods", spec, "--target", NO_TARGET, "--out", str(tmp_path / "r")])
    assert expected in error


def test_a_plugin_methods_options_are_checked_too(capsys, tmp_path):
    error = one_error(capsys, ["run", "--methods", "bigram@lenght=2", "--method-file", str(PLUGIN),
                               "--target", NO_TARGET, "--out", str(tmp_path / "r")])
    assert "unknown option lenght for bigram; valid: length; did you mean length?" in error


def test_tune_checks_options_before_decoding(capsys, tmp_path):
    error = one_error(capsys, ["tune", "--methods", "pld@max_ngarm=2", "--dev-questions", "1", "--target", NO_TARGET,
                               "--out", str(tmp_path / "t")])
    assert "unknown option max_ngarm for pld" in error and "did you mean max_ngram?" in error


def test_every_tuning_setting_and_default_is_valid():
    for info in available_methods().values():
        info.check_tuning()
        defaults = info.resolve({})
        for option in info.options:  # a default passes its own check
            assert option.default is None or option.parse(option.default, info.name) == defaults[option.name]


def test_a_plugin_with_an_undeclared_tuning_key_is_refused():
    bad = MethodInfo("x", "x", True, lambda ctx: None, ("", "size=2"), (Option("length", 4, "h", int),))
    with pytest.raises(SpecbenchError, match="unknown option size for x"):
        bad.check_tuning()


def test_opt_reaches_the_methods_that_declare_it_and_shows_in_the_label():
    rows = select_methods(["vanilla", "sps", "pld@num_tokens=3"], common={"gamma": "2", "num_tokens": "5"})
    assert [r.name for r in rows] == ["vanilla", "sps@gamma=2", "pld@num_tokens=3"]  # @ wins over --opt
    assert rows[1].effective() == {"head": None, "gamma": 2, "schedule": "fixed", "preset": None}
    assert rows[2].effective() == {"max_ngram": 3, "min_ngram": 1, "num_tokens": 3, "rule": "saxena",
                                    "preset": None}


def test_a_builder_reads_only_declared_options():
    info = MethodInfo("probe", "reads an option it never declared", True, lambda ctx: ctx.option("secret"),
                      options=(Option("length", 4, "h", int),))
    with pytest.raises(SpecbenchError, match="option secret is read but not declared"):
        info.drafter(BuildContext(target=None))  # the probe never touches its target


def test_records_and_run_json_carry_the_options_as_run_and_budget_shows_opt(tiny_target_dir, tiny_draft_dir,
                                                                             tmp_path):
    out = tmp_path / "sps"
    assert main(["run", "--target", str(tiny_target_dir), "--out", str(out), "--report-dir", str(out / "report"),
                 "--max-new-tokens", "12", "--methods", "vanilla,sps", "--draft", str(tiny_draft_dir), "--tasks",
                 "gsm8k", "--limit", "1", "--temperatures", "0", "--opt", "gamma=3"]) == 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    sps = [r for r in records if r["method"] != "vanilla"]
    options = {"head": None, "gamma": 3, "schedule": "fixed", "preset": None}
    assert sps and all(r["method"] == "sps@gamma=3" and r["options"] == options for r in sps)
    assert all(r["options"] == {} for r in records if r["method"] == "vanilla")
    info = json.loads((out / "run.json").read_text())
    assert info["method_options"] == {"vanilla": {}, "sps@gamma=3": options}
    budget = (out / "report" / "budget.md").read_text()
    assert "| sps@gamma=3 | gamma=3 |" in budget


def test_preset_paper_gives_the_reference_codes_settings_and_a_given_option_wins():
    """preset=paper: each method's published defaults by one name (EAGLE's EaModel.from_pretrained, Medusa's
    default tree, Saxena's PLD), beside the defaults tuned for this machine."""
    rows = select_methods(["eagle@preset=paper", "eagle3@preset=paper", "medusa@preset=paper", "pld@preset=paper",
                           "eagle@preset=paper:top_k=4", "sps@preset=paper", "pard@preset=paper",
                           "eagle1@preset=paper"])
    effective = [row.effective() for row in rows]
    assert {k: effective[0][k] for k in ("top_k", "depth", "total_tokens")} == {"top_k": 10, "depth": 6,
                                                                                 "total_tokens": 59}
    assert {k: effective[1][k] for k in ("top_k", "depth", "total_tokens")} == {"top_k": 10, "depth": 8,
                                                                                 "total_tokens": 59}
    assert effective[2]["tree"] == "mc_sim_7b_63" and effective[3]["rule"] == "saxena"
    assert effective[4]["top_k"] == 4 and effective[4]["depth"] == 6 and effective[4]["preset"] == "paper"
    assert (effective[5]["gamma"], effective[5]["schedule"]) == (5, "heuristic")  # Spec-Bench's assisted generation
    assert effective[6]["gamma"] == 12  # AMD's draft_k
    paths = parse_tree(effective[7]["tree"])  # EAGLE-1's choices.mc_sim_7b_63: 25 paths, not Medusa's 63-node tree
    assert len(paths) == 25 and max(map(len, paths)) == 5 and (2, 1) in paths and (1, 0, 0, 0, 0) not in paths
    assert rows[0].name == "eagle@preset=paper"  # the label says which settings the row ran with
    with pytest.raises(SpecbenchError, match="option preset=gpu for eagle: expected one of paper"):
        select_methods(["eagle@preset=gpu"])
    with pytest.raises(SpecbenchError, match="unknown option preset for vanilla"):
        select_methods(["vanilla@preset=paper"])
