"""Run Spec-Bench's own evaluation code on a `specbench export --format spec-bench` folder and compare.

    python scripts/check_spec_bench_export.py --spec-bench PATH/TO/Spec-Bench --export RUN/report/spec-bench

For every (method, temperature, task) row of speed_prediction.json this calls speed() from Spec-Bench's
evaluation/speed.py (its command line always runs a hard-coded mean report, so the function is imported, as its
get_single_speedup does) with the exported tokenizer, and reports τ and the speedup it returns next to ours; then
equal.py's run_compare for every T=0 method against vanilla. Exits 1 when a figure differs by more than 1e-9
(relative) or when equal.py and `specbench check` disagree is left to the reader: equal.py's verdict is printed.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec-bench", type=Path, required=True, help="a Spec-Bench checkout (has evaluation/)")
    parser.add_argument("--export", type=Path, required=True, help="the export folder")
    args = parser.parse_args()
    if not (args.spec_bench / "evaluation" / "speed.py").is_file():
        print(f"{args.spec_bench}: no evaluation/speed.py (not a Spec-Bench checkout)", file=sys.stderr)
        return 2
    prediction = args.export / "speed_prediction.json"
    if not prediction.is_file():
        print(f"{args.export}: no speed_prediction.json (run specbench export first)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(args.spec_bench.resolve()))
    from evaluation.equal import run_compare  # Spec-Bench's code, unchanged
    from evaluation.speed import speed

    rows = json.loads(prediction.read_text())
    tokenizer = str(args.export / "tokenizer")
    worst = 0.0
    print("| method | T | task | τ speed.py | τ ours | speedup speed.py | speedup predicted | our total | our per question |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        with contextlib.redirect_stdout(io.StringIO()):
            _, _, ratio, accepts = speed(r["file"], r["baseline_file"], tokenizer, task=r["task"], report=False)
        tau = sum(accepts) / len(accepts)
        worst = max(worst, abs(tau - r["tau"]) / r["tau"], abs(ratio - r["speedup"]) / r["speedup"])
        print(f"| {r['method']} | {r['temperature']:g} | {r['task']} | {tau:.4f} | {r['tau']:.4f} | {ratio:.4f}x | "
              f"{r['speedup']:.4f}x | {r['speedup_total']:.4f}x | {r['speedup_per_question']:.4f}x |")
    print(f"\nlargest relative difference between speed.py and the prediction: {worst:.2e}")
    pairs = {(r["file"], r["baseline_file"]) for r in rows if r["temperature"] == 0}
    for file, base in sorted(pairs):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            run_compare(str(Path(file).parent) + "/", Path(base).name, Path(file).name)
        print(f"equal.py {Path(base).name} vs {Path(file).name}: {out.getvalue().strip()}")
    return 0 if worst <= 1e-9 else 1


if __name__ == "__main__":
    raise SystemExit(main())
