"""How long a `specbench run` takes to its first token, and where the time goes: the command runs from an empty
cost store (SPECBENCH_CACHE in a fresh folder, so the one-time cost measurement is included) and each milestone
of its stderr is timed from the start: the cost measurement's first line, the questions bar, the first question
started (its `0/N tok` postfix), the first emitted tokens shown (its first `tok/s`, redrawn every 0.5 s), exit.

Usage: python scripts/first_token.py --json results/first_token.json -- run --target shape:llama-3.2-1b \
           --synthetic-acceptance 0.8 --methods vanilla --tasks gsm8k --limit 1 --max-new-tokens 8
Prints the record (JSON) and writes it to --json; the machine's other load is in the run's run.json (`load`).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MILESTONES = {  # name: what first marks it in the run's stderr
    "cost_measurement": re.compile(r"measuring this machine's costs"),
    "questions_bar": re.compile(r"questions: "),
    "first_question": re.compile(r": 0/\d+ tok"),
    "first_tokens_shown": re.compile(r"\d+/\d+ tok, [\d.]+ tok/s"),
}


def timed_run(argv: list[str], out: Path) -> dict:
    env = {**os.environ, "SPECBENCH_CACHE": str(out / "cache"), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "specbench", *argv, "--out", str(out / "run"),
               "--report-dir", str(out / "report")]
    start = time.monotonic()
    seen: dict[str, float] = {}
    text = ""
    with subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env) as process:
        assert process.stderr is not None
        while chunk := process.stderr.read1(4096):
            text += chunk.decode("utf-8", "replace")
            for name, pattern in MILESTONES.items():
                if name not in seen and pattern.search(text):
                    seen[name] = round(time.monotonic() - start, 1)
    seen["exit"] = round(time.monotonic() - start, 1)
    run_json = out / "run" / "run.json"
    info = json.loads(run_json.read_text()) if run_json.is_file() else {}
    return {"command": "python -m specbench " + " ".join(argv), "returncode": process.returncode,
            "seconds_from_start": seen, "machine": platform.node(), "cores": os.cpu_count(),
            "load": info.get("load"), "costs_source": (info.get("costs") or {}).get("source"),
            "costs_measured": (info.get("costs") or {}).get("measured"),
            "stderr_tail": text.replace("\r", "\n").strip().splitlines()[-3:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, required=True, help="where the record goes")
    parser.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the specbench arguments (without --out)")
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    with tempfile.TemporaryDirectory(prefix="first-token-") as folder:
        record = timed_run(argv, Path(folder))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
