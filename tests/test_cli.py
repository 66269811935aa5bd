"""The CLI end to end on a tiny local model: run, resume, report, check, and every bad input."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specbench.analysis.tables import short_labels
from specbench.cli import main

REPO = Path(__file__).resolve().parents[1]


def write_questions(folder: Path, task: str, lines: list[str]) -> Path:
    (folder / task).mkdir(parents=True, exist_ok=True)
    (folder / task / "question.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def run_args(target: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "--target", str(target), "--out", str(out), "--report-dir", str(out / "report"),
            "--max-new-tokens", "12", *extra]


@pytest.fixture(scope="module")
def finished_run(tiny_target_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "r"
    code = main(run_args(tiny_target_dir, out, "--methods", "vanilla,pld", "--tasks", "mt_bench,gsm8k",
                         "--limit", "3", "--temperatures", "0,1"))
    assert code == 0
    return out


def test_run_writes_records_and_tables(finished_run):
    records = [json.loads(line) for line in (finished_run / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2 * 2 * 3 * 2  # methods x tasks x questions x temperatures
    first = records[0]
    for key in ("method", "task", "temperature", "question_id", "category", "target", "seed", "choices"):
        assert key in first
    choice = first["choices"][0]
    for key in ("turns", "new_tokens", "wall_time", "accept_lengths", "decoding_steps", "token_ids"):
        assert key in choice
    mt = next(r for r in records if r["task"] == "mt_bench")
    assert len(mt["choices"][0]["token_ids"]) == 2  # two turns
    info = json.loads((finished_run / "run.json").read_text())
    assert {"torch", "transformers", "device", "torch_threads"} <= set(info["environment"])
    files = {p.name for p in (finished_run / "report").iterdir()}
    for t in (0, 1):
        assert {f"speedup_T{t}.{ext}" for ext in ("csv", "md", "tex")} <= files
        assert {f"speedup_specbench_T{t}.{ext}" for ext in ("csv", "md", "tex")} <= files
        for plot in ("speedup", "tau_distribution", "acceptance_by_position", "time_split"):
            assert {f"{plot}_T{t}.png", f"{plot}_T{t}.pdf"} <= files
    markdown = (finished_run / "report" / "speedup_T0.md").read_text()
    assert "command: " in markdown and "git commit" in markdown and "transformers" in markdown
    markdown = (finished_run / "report" / "speedup_T0.md").read_text()
    assert "vanilla" in markdown and "pld" in markdown and "1.00×" in markdown


def test_check_passes_then_catches_a_tampered_record(finished_run, tmp_path, capsys):
    capsys.readouterr()
    assert main(["check", str(finished_run)]) == 0
    assert "not checked: 12 records at T=1" in capsys.readouterr().out  # the run's sampled records are named
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    lines = (finished_run / "records.jsonl").read_text().splitlines()
    for i, line in enumerate(lines):
        record = json.loads(line)
        if record["method"] == "pld" and record["temperature"] == 0:
            record["choices"][0]["token_ids"][0][3] += 1
            lines[i] = json.dumps(record)
            break
    (tampered / "records.jsonl").write_text("\n".join(lines) + "\n")
    (tampered / "run.json").write_text((finished_run / "run.json").read_text())
    capsys.readouterr()
    assert main(["check", str(tampered)]) == 1
    out = capsys.readouterr().out
    assert "first divergence at token 3" in out
    # Vanilla's token is the target's argmax on the rebuilt prefix, so its margin over the tampered one is > 0:
    # a wrong prompt or prefix would show up here as a negative or zero margin.
    margin = float(re.search(r"target logit margin (\S+) \(", out).group(1))
    assert margin > 0 and "clear margin" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without CUDA")
def test_check_refuses_a_cuda_runs_margins_without_cuda_in_one_line(capsys):
    """A bf16 run decoded on an H200 departs from vanilla at ties: its margins are the device's, not this CPU's."""
    run = Path(__file__).resolve().parents[1] / "reports" / "gpu-h200" / "runtime-1" / "run-graphs-bfloat16"
    capsys.readouterr()
    assert main(["check", str(run)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "decoded on cuda" in err[0] and "--no-margins" in err[0], err
    assert main(["check", str(run), "--no-margins"]) == 1  # the departures, counted without margins
    assert "first divergence at token 19 (vanilla 506" in capsys.readouterr().out


def test_repeats_are_interleaved_and_give_intervals(tiny_target_dir, tmp_path):
    out = tmp_path / "r"
    args = run_args(tiny_target_dir, out, "--methods", "vanilla,pld", "--tasks", "gsm8k", "--limit", "2",
                    "--temperatures", "1", "--repeats", "2")
    assert main(args) == 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    # Repeats back to back, methods alternating within each, their order rotating from one to the next.
    assert [(r["question_id"], r["repeat"], r["method"]) for r in records][:4] == [
        (records[0]["question_id"], 0, "vanilla"), (records[0]["question_id"], 0, "pld"),
        (records[0]["question_id"], 1, "pld"), (records[0]["question_id"], 1, "vanilla")]
    by_key = {(r["question_id"], r["repeat"], r["method"]): r["choices"][0]["token_ids"] for r in records}
    assert any(by_key[(q, 0, "vanilla")] != by_key[(q, 1, "vanilla")] for q, _, _ in by_key)  # fresh draws
    assert re.search(r"× \[[\d.e-]+, [\d.]+\]", (out / "report" / "speedup_T1.md").read_text())  # [low, high]
    assert main([*args[:-1], "3"]) == 0  # more repeats resume the same run
    assert len((out / "records.jsonl").read_text().splitlines()) == 12


def test_sampled_check_writes_p_values(tiny_target_dir, tmp_path, capsys):
    code = main(["check", "--sampled", "--methods", "pld", "--target", str(tiny_target_dir), "--tasks", "gsm8k",
                 "--samples", "40", "--tokens", "2", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "pld" in out and "OK" in out
    table = (tmp_path / "sampled_check.csv").read_text()
    assert "p_value" in table and "detectable_w_80" in table


def test_report_command(finished_run, tmp_path, capsys):
    assert main(["report", str(finished_run), "--out", str(tmp_path)]) == 0
    assert "T=0" in capsys.readouterr().out
    assert (tmp_path / "speedup_T1.tex").read_text().count(r"\toprule") == 1


def finished_gsm8k_run(tiny_target_dir: Path, out: Path, questions: int) -> tuple[list[str], Path, list[str]]:
    """vanilla and pld on the first `questions` of gsm8k, finished: (its arguments, records.jsonl, its lines)."""
    args = run_args(tiny_target_dir, out, "--methods", "vanilla,pld", "--tasks", "gsm8k", "--limit", str(questions),
                    "--temperatures", "0")
    assert main(args) == 0
    path = out / "records.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    assert len(lines) == 2 * questions
    return args, path, lines


def test_resume_skips_finished_questions_and_keeps_them(tiny_target_dir, tmp_path):
    args, path, lines = finished_gsm8k_run(tiny_target_dir, tmp_path / "r", 3)
    # A kill during the last write leaves a cut line behind, and the last question unfinished.
    path.write_text("".join(lines[:4]) + lines[4][:25])
    assert main(args) == 0
    after = path.read_text().splitlines(keepends=True)
    assert after[:4] == lines[:4]
    assert len(after) == 6
    assert {json.loads(x)["question_id"] for x in after[4:]} == {json.loads(x)["question_id"] for x in lines[4:]}


def test_a_question_interrupted_between_its_methods_is_decoded_again_whole(tiny_target_dir, tmp_path, capsys):
    out = tmp_path / "r"
    args, path, lines = finished_gsm8k_run(tiny_target_dir, out, 2)
    # An interrupt after the last question's first method: its second method would be timed in another process.
    path.write_text("".join(lines[:3]))
    capsys.readouterr()
    assert main(args) == 0
    assert "1 earlier record(s) of questions that only some methods had finished" in capsys.readouterr().err
    after = path.read_text().splitlines(keepends=True)
    assert after[:2] == lines[:2] and len(after) == 4  # the first question stays; the last is decoded whole again
    assert (out / "records.superseded.jsonl").read_text() == lines[2]
    last = {json.loads(x)["question_id"] for x in lines[2:]}
    assert {json.loads(x)["question_id"] for x in after[2:]} == last
    assert {json.loads(x)["method"] for x in after[2:]} == {"vanilla", "pld"}


def bad_input(capsys, args: list[str]) -> str:
    capsys.readouterr()
    code = main(args)
    err = capsys.readouterr().err.strip()
    assert code != 0
    # Library progress bars (model loading) may precede it; the error itself is one line, with no traceback.
    errors = [line for line in err.splitlines() if line.startswith("specbench: error:")]
    assert len(errors) == 1 and err.endswith(errors[0]) and "Traceback" not in err, err
    return errors[0]


def test_a_new_run_never_writes_over_another_runs_tables(finished_run, tiny_target_dir, tmp_path, capsys):
    report = finished_run / "report"
    before = {p.relative_to(report): p.read_bytes() for p in report.rglob("*") if p.is_file()}  # profiles/ too
    args = ["run", "--target", str(tiny_target_dir), "--out", str(tmp_path / "other"), "--report-dir", str(report),
            "--methods", "vanilla", "--tasks", "gsm8k", "--limit", "1", "--temperatures", "0", "--max-new-tokens", "4"]
    assert "holds the tables of another run" in bad_input(capsys, args)
    assert not (tmp_path / "other" / "records.jsonl").exists()  # refused before decoding
    assert {p.relative_to(report): p.read_bytes() for p in report.rglob("*") if p.is_file()} == before
    # The same run may rewrite its own tables (a resume or `report` again).
    assert main(["report", str(finished_run), "--out", str(report)]) == 0


@pytest.fixture
def run_with_records(tiny_target_dir, tmp_path) -> tuple[Path, bytes]:
    out = tmp_path / "done"
    assert main(run_args(tiny_target_dir, out, "--methods", "vanilla", "--tasks", "gsm8k", "--limit", "2",
                         "--temperatures", "0")) == 0
    return out, (out / "records.jsonl").read_bytes()


def test_bad_inputs_leave_finished_records_untouched(tiny_target_dir, other_tokenizer_dir, tmp_path, capsys,
                                                       run_with_records):
    out, before = run_with_records
    base = ["--tasks", "gsm8k", "--limit", "2", "--temperatures", "0", "--max-new-tokens", "12"]
    cases = {
        "unknown method": (["--methods", "nope"] + base, "valid: vanilla"),
        "unknown task": (["--methods", "vanilla", "--tasks", "nope", "--temperatures", "0"], "valid: all"),
        "max new tokens": (["--methods", "vanilla", *base[:-2], "--max-new-tokens", "0"], "must be > 0"),
        "negative limit": (["--methods", "vanilla", "--tasks", "gsm8k", "--limit", "-1"], "--limit must be > 0, got -1"),
        "other settings": (["--methods", "vanilla", *base, "--seed", "7"], "other settings"),
        "no draft": (["--methods", "sps", *base], "needs a draft model"),
        "bad temperature": (["--methods", "vanilla", "--tasks", "gsm8k", "--temperatures", "-1"], "temperature"),
    }
    for name, (extra, expected) in cases.items():
        args = ["run", "--target", str(tiny_target_dir), "--out", str(out), "--report-dir", str(tmp_path / "rep"),
                *extra]
        err = bad_input(capsys, args)
        assert expected in err, (name, err)
        assert (out / "records.jsonl").read_bytes() == before, name
    err = bad_input(capsys, ["run", "--out", str(tmp_path / "fresh"), "--methods", "vanilla", *base,
                             "--target", "no-such-model"])
    assert "cannot resolve model" in err
    # A draft with another tokenizer (a new run directory: the draft is a fixed setting of a run).
    err = bad_input(capsys, run_args(tiny_target_dir, tmp_path / "fresh", "--methods", "sps", "--draft",
                                     str(other_tokenizer_dir), *base))
    assert "different tokenizer" in err


def test_bad_question_files(tiny_target_dir, tmp_path, capsys):
    cases = {
        "missing": (None, "no such question file"),
        "malformed": (['{"question_id": 1, "turns": ["ok"]}', '{"question_id": 2, "turns": [oops'], "question.jsonl:2"),
        "empty prompt": (['{"question_id": 1, "turns": ["  "]}'], "empty prompt"),
        "no turns": (['{"question_id": 1}'], "'turns'"),
    }
    for name, (lines, expected) in cases.items():
        folder = tmp_path / name.replace(" ", "_")
        folder.mkdir()
        if lines is not None:
            write_questions(folder, "gsm8k", lines)
        err = bad_input(capsys, run_args(tiny_target_dir, tmp_path / "out", "--methods", "vanilla", "--tasks",
                                         "gsm8k", "--question-dir", str(folder)))
        assert expected in err, (name, err)


def test_prompt_longer_than_context(tiny_target_dir, tmp_path, capsys):
    long_prompt = "the quick brown fox " * 400
    folder = write_questions(tmp_path / "q", "gsm8k", [json.dumps({"question_id": 1, "turns": [long_prompt]})])
    err = bad_input(capsys, run_args(tiny_target_dir, tmp_path / "out", "--methods", "vanilla", "--tasks", "gsm8k",
                                     "--question-dir", str(folder)))
    assert "exceeds the model's context" in err


def test_sps_with_a_matching_draft_runs(tiny_target_dir, tiny_draft_dir, tmp_path):
    out = tmp_path / "sps"
    assert main(run_args(tiny_target_dir, out, "--methods", "vanilla,sps", "--draft", str(tiny_draft_dir),
                         "--tasks", "gsm8k", "--limit", "2", "--temperatures", "0", "--opt", "gamma=3")) == 0
    assert main(["check", str(out)]) == 0


def test_module_entry_point_exits_non_zero_without_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "specbench", "run", "--methods", "nope", "--out", str(tmp_path)],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "unknown method nope" in result.stderr


def test_version_help_and_argument_errors_answer_before_torch_is_imported():
    """The CLI parses before it imports torch or transformers (many seconds on a busy machine), so `--version`, `--help`,
    a misspelled option, a bad choice and `costs show` answer at once; checked by what they imported, not timed."""
    script = ("import sys\nfrom specbench.cli import main\n"
              "for argv in (['--version'], ['--help'], ['run', '--bogus'], ['run', '--runtime', 'nope'],\n"
              "             ['train', 'eagle', '--autocast', 'fp8'], ['costs', 'show']):\n"
              "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
              "print('imported:', sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert result.stdout.splitlines()[-1] == "imported: []", result.stderr
    assert "specbench " in result.stdout and "unrecognized arguments: --bogus" in result.stderr
    assert "invalid choice: 'nope'" in result.stderr and "invalid choice: 'fp8'" in result.stderr


# Commands and refused inputs that must answer before torch loads: (argv, what stderr or stdout says). Each runs in a
# fresh interpreter of its own, which then reports whether torch or transformers was imported.
AT_ONCE = [
    (["list"], "methods:"),
    (["list", "eagle"], "eagle (lossless)"),
    (["run", "--methods", "vanilla,pldd"], "did you mean pld?"),
    (["run", "--methods", "vanilla", "--tasks", "gsm8kk"], "unknown task gsm8kk"),
    (["run", "--methods", "vanilla", "--limit", "0"], "--limit must be > 0"),
    (["run", "--methods", "eagle", "--draft", "/no/such/folder"], "--draft /no/such/folder: no such folder"),
    (["run", "--methods", "eagle@head=/no/such/head"], "head=/no/such/head: no such folder"),
    (["run", "--methods", "sps", "--draft", "nobody/no-such-model"], "HF_HUB_OFFLINE=1 while it is not in the local cache"),
    (["run", "--methods", "vanilla", "--target", "nobody/no-such-model"], "HF_HUB_OFFLINE=1 while it is not in"),
    (["run", "--methods", "vanilla", "--target", "/no/such/model"], "cannot resolve model '/no/such/model'"),
    (["run", "--methods", "vanilla", "--question-file", "/no/such.jsonl"], "no such question file"),
    (["run", "--methods", "vanilla", "--out", "OUT_IS_A_FILE"], "a file, not a run folder"),
]


@pytest.mark.parametrize("argv,says", AT_ONCE, ids=[" ".join(a) for a, _ in AT_ONCE])
def test_listing_and_refused_inputs_import_no_torch(argv, says, tmp_path):
    afile = tmp_path / "a-file"
    afile.write_text("not a folder")
    argv = [str(afile) if a == "OUT_IS_A_FILE" else a for a in argv]
    if argv[0] == "run" and "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    script = ("import sys\nfrom specbench.cli import main\ncode = main(sys.argv[1:])\n"
              "print('imported:', sorted(m for m in ('torch', 'transformers') if m in sys.modules), 'exit:', code)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}  # an empty hub cache
    result = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, cwd=REPO, env=env)
    last = result.stdout.splitlines()[-1]
    assert last == f"imported: [] exit: {0 if argv[0] == 'list' else 2}", result.stderr
    assert says in result.stdout + result.stderr
    if argv[0] == "run":  # one error line, and no run folder left behind
        assert [line for line in result.stderr.splitlines() if line.startswith("specbench: error:")] != []
        assert not (tmp_path / "out").exists()


def test_a_finished_run_rerun_loads_nothing(finished_run, tiny_target_dir, capsys, monkeypatch):
    out = finished_run
    args = run_args(tiny_target_dir, out, "--methods", "vanilla,pld", "--tasks", "mt_bench,gsm8k", "--limit", "3",
                    "--temperatures", "0,1")
    before = (out / "run.json").read_text()

    def no_load(*_, **__):
        raise AssertionError("a finished run's rerun loaded the target")

    monkeypatch.setattr("specbench.run.runner.Decoder", no_load)
    capsys.readouterr()
    assert main(args) == 0
    assert "nothing to do" in capsys.readouterr().err
    assert (out / "run.json").read_text() == before  # no resumed session recorded


def test_list_shows_methods_and_tasks(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("vanilla", "pld", "sps", "mt_bench", "natural_questions", "lossless"):
        assert name in out


def test_plot_legends_shorten_head_paths_unless_two_would_read_the_same():
    labels = ["vanilla", "eagle@head=/tmp/x/heads/self-t0/snapshots/500000", "medusa@head=/a/b/c/d (lossy)",
              "eagle@total_tokens=8"]
    assert list(short_labels(labels).values()) == ["vanilla", "eagle@head=…/snapshots/500000",
                                                   "medusa@head=…/c/d (lossy)", "eagle@total_tokens=8"]
    alike = ["eagle@head=/a/shifted/snapshots/1", "eagle@head=/a/self-t0/snapshots/1"]
    assert short_labels(alike) == {label: label for label in alike}
