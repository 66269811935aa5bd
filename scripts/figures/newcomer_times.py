"""A newcomer's first hour, timed (issue 83): what each command costs before it answers, the README's first run
from an empty cache and again on a warm one (the time to its first question), the rerun of a finished run, and the
README's Python API example against the CLI decoding the same question with the same method. All of it twice: on
the machine as it is (run it idle), then beside a busy two-thread process (a torch matmul loop, stopped after).

Writes OUT/times.json (every figure, the commands, the CPU, the commit) and OUT/README.md (the tables, made from
times.json). Nothing here is a test: it measures, and the report says on what machine.

    python scripts/figures/newcomer_times.py [--out reports/newcomer]   (after scripts/install.sh)
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
FIRST_RUN = ["run", "--methods", "vanilla,pld", "--tasks", "mt_bench,gsm8k", "--limit", "2", "--temperatures", "0",
             "--max-new-tokens", "64"]  # README command 1
AT_ONCE = [  # commands and refused inputs that must answer before anything loads
    ["--version"], ["list"], ["list", "eagle"], ["doctor"], ["runn"],
    ["run", "--methods", "vanilla,pldd"], ["run", "--methods", "vanilla", "--tasks", "gsm8kk"],
    ["run", "--methods", "eagle", "--draft", "/no/such/folder"], ["run", "--methods", "sps", "--draft", "nobody/none"],
    ["run", "--methods", "vanilla", "--target", "/no/such/model"],
    ["run", "--methods", "vanilla", "--question-file", "/no/such.jsonl"],
]
PROMPT = "Natalia sold 48 clips in April and half as many in May. How many clips did she sell?"  # the README's
LOAD = "import torch\ntorch.set_num_threads(2)\na = torch.randn(1024, 1024)\nwhile True:\n    a @ a\n"


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> dict:
    """Run one command; its wall time, exit code, when it first printed anything (its first line or its error) and
    when the first question's bar appeared (seconds, or None)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first: list[float] = []
    err: list[bytes] = []
    err_at: list[float] = []

    def read_stderr() -> None:
        for chunk in iter(lambda: proc.stderr.read(256), b""):
            if not err:
                err_at.append(time.perf_counter() - start)
            err.append(chunk)
            if not first and re.search(rb"questions: +\d+%", b"".join(err[-3:])):
                first.append(time.perf_counter() - start)

    reader = threading.Thread(target=read_stderr)
    reader.start()
    out: list[bytes] = []
    for chunk in iter(lambda: proc.stdout.read(1), b""):
        if not out:
            answered = time.perf_counter() - start  # the first line it printed, or its error line
        out.append(chunk)
    proc.wait()
    reader.join()
    said = ([answered] if out else []) + err_at
    return {"seconds": round(time.perf_counter() - start, 2), "exit": proc.returncode,
            "first_output_s": round(min(said), 2) if said else None,
            "first_question_s": round(first[0], 2) if first else None,
            "stdout": b"".join(out).decode("utf-8", "replace"), "stderr": b"".join(err).decode("utf-8", "replace")}


@contextlib.contextmanager
def two_thread_load(busy: bool) -> Iterator[None]:
    if not busy:
        yield
        return
    load = subprocess.Popen([PY, "-c", LOAD])
    time.sleep(5)
    try:
        yield
    finally:
        load.kill()
        load.wait()


def api_example() -> str:
    """The README's Python API block, exec'd as written, then its first generate's figures printed as JSON."""
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    return (f"import json, time\nstart = time.perf_counter()\nexec(compile({code!r}, 'README.md', 'exec'))\n"
            "print('API', json.dumps({'decode_s': result.wall_time, 'tokens': len(result.token_ids), "
            "'tau': result.tau, 'process_s': time.perf_counter() - start}))")


def condition(busy: bool, work: Path) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "SPECBENCH_CACHE": str(work / "cache")}
    cli = [PY, "-m", "specbench"]
    found: dict = {"at_once": {}}
    with two_thread_load(busy):
        for argv in AT_ONCE:
            extra = ["--out", str(work / "refused")] if argv[0] == "run" else []
            found["at_once"][" ".join(argv)] = timed([*cli, *argv, *extra], env, work)
        first = timed([*cli, *FIRST_RUN, "--out", str(work / "first")], env, ROOT)
        warm = timed([*cli, *FIRST_RUN, "--out", str(work / "warm")], env, ROOT)
        rerun = timed([*cli, *FIRST_RUN, "--out", str(work / "first")], env, ROOT)
        api = timed([PY, "-c", api_example()], env, ROOT)
        questions = work / "question.jsonl"
        questions.write_text(json.dumps({"question_id": 1, "category": "gsm8k", "turns": [PROMPT]}) + "\n")
        same = timed([*cli, "run", "--methods", "eagle@total_tokens=8", "--no-baseline", "--question-file",
                      str(questions), "--max-new-tokens", "64", "--temperatures", "0", "--out", str(work / "same")],
                     env, ROOT)
    record = json.loads((work / "same" / "records.jsonl").read_text().splitlines()[0])["choices"][0]
    api_line = next(line for line in api["stdout"].splitlines() if line.startswith("API "))
    found.update(
        first_run={k: first[k] for k in ("seconds", "exit", "first_question_s")},
        warm_run={k: warm[k] for k in ("seconds", "exit", "first_question_s")},
        rerun={"seconds": rerun["seconds"], "exit": rerun["exit"], "nothing_to_do": "nothing to do" in rerun["stderr"]},
        api={"seconds": api["seconds"], "exit": api["exit"], **json.loads(api_line[4:]),
             "warned": "specbench: warning" in api["stderr"]},
        cli_same={"seconds": same["seconds"], "exit": same["exit"], "decode_s": sum(record["wall_time"]),
                  "tokens": sum(record["new_tokens"])},
        threads={name: json.loads((work / name / "run.json").read_text())["load"][-1]["threads"]
                 for name in ("first", "warm")})
    for name, result in found["at_once"].items():
        found["at_once"][name] = {k: result[k] for k in ("seconds", "first_output_s", "exit")}
    return found


def cpu() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown")
    flags = set(next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), []))
    wanted = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
    return f"{model}, {os.cpu_count()} cores, flags: {' '.join(wanted)}"


def with_ratios(times: dict) -> dict:
    """times with the API's time over the CLI's, decoding and whole process, per condition (rounded as shown)."""
    def over(key: str) -> dict:
        return {c: round(times[c]["api"][key] / times[c]["cli_same"][key], 2) for c in ("idle", "busy")}
    return {**times, "api_over_cli_decoding": over("decode_s"), "api_over_cli_process": over("seconds")}


def readme(times: dict) -> str:
    rows = []
    for name in times["idle"]["at_once"]:
        idle, busy = times["idle"]["at_once"][name], times["busy"]["at_once"][name]
        rows.append(f"| `{name}` | {idle['first_output_s']:.2f} | {idle['seconds']:.2f} | {busy['first_output_s']:.2f} | "
                    f"{busy['seconds']:.2f} | {idle['exit']} |")
    def cell(key: str, field: str, fmt: str = ".1f") -> str:
        return " | ".join(format(times[c][key][field], fmt) if times[c][key][field] is not None else "—"
                          for c in ("idle", "busy"))
    ratio, process = times["api_over_cli_decoding"], times["api_over_cli_process"]
    lines = [
        "# A newcomer's first hour, timed", "",
        f"Made by `python scripts/figures/newcomer_times.py` on {times['date']} at {times['commit']}.",
        f"CPU: {times['cpu']}. Each figure is one wall-clock measurement of a fresh process (`idle`: the machine as it",
        "was; `busy`: beside `torch.set_num_threads(2); while True: a @ a`). The records: `times.json`.", "",
        "Commands and refused inputs, seconds until their first line (or error line) and until they exited (exit: "
        "their code):", "",
        "<!-- src: times.json -->", "| command | idle: first line | idle: done | busy: first line | busy: done | exit |",
        "| --- | --- | --- | --- | --- | --- |", *rows, "",
        f"README command 1 (`python -m specbench {' '.join(FIRST_RUN)} --out DIR`), seconds:", "",
        "<!-- src: times.json -->", "| what | idle | busy |", "| --- | --- | --- |",
        f"| first run, empty cache: whole command | {cell('first_run', 'seconds')} |",
        f"| first run, empty cache: until the first question | {cell('first_run', 'first_question_s')} |",
        f"| again into a new folder, warm cache: whole command | {cell('warm_run', 'seconds')} |",
        f"| again into a new folder, warm cache: until the first question | {cell('warm_run', 'first_question_s')} |",
        f"| rerun of the finished run (\"nothing to do\", then its report) | {cell('rerun', 'seconds')} |", "",
        "The README's Python API example against the CLI decoding its first prompt with the same method "
        "(`run --methods eagle@total_tokens=8 --no-baseline --question-file` that prompt, 64 tokens, T=0):", "",
        "<!-- src: times.json -->", "| what | idle | busy |", "| --- | --- | --- |",
        f"| API example, whole process (s) | {cell('api', 'seconds')} |",
        f"| CLI, whole process (s) | {cell('cli_same', 'seconds')} |",
        f"| API `generate`, the first prompt (s) | {cell('api', 'decode_s', '.2f')} |",
        f"| CLI, the same question decoded (s) | {cell('cli_same', 'decode_s', '.2f')} |",
        f"| API / CLI, decoding | {ratio['idle']:.2f} | {ratio['busy']:.2f} |",
        f"| API / CLI, whole process | {process['idle']:.2f} | {process['busy']:.2f} |", "",
        f"Tokens: API {times['idle']['api']['tokens']}, CLI {times['idle']['cli_same']['tokens']}. "
        f"Threads the runs chose, idle / busy: {times['idle']['threads']['first']} / {times['busy']['threads']['first']}; "
        f"the API warned of the load: {times['busy']['api']['warned']} (busy), {times['idle']['api']['warned']} (idle).",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "newcomer")
    parser.add_argument("--readme-only", action="store_true",
                        help="measure nothing: remake OUT/README.md (and the ratios in times.json) from OUT/times.json")
    args = parser.parse_args()
    if args.readme_only:
        times = with_ratios(json.loads((args.out / "times.json").read_text(encoding="utf-8")))
        (args.out / "times.json").write_text(json.dumps(times, indent=1) + "\n", encoding="utf-8")
        (args.out / "README.md").write_text(readme(times), encoding="utf-8")
        return 0
    times: dict = {"cpu": cpu(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
                   "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                            cwd=ROOT).stdout.strip(),
                   "first_run": f"python -m specbench {' '.join(FIRST_RUN)}"}
    for name, busy in (("idle", False), ("busy", True)):
        with tempfile.TemporaryDirectory() as work:
            print(f"{name}: measuring", file=sys.stderr)
            times[name] = condition(busy, Path(work))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "times.json").write_text(json.dumps(with_ratios(times), indent=1) + "\n", encoding="utf-8")
    (args.out / "README.md").write_text(readme(times), encoding="utf-8")
    print((args.out / "README.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
