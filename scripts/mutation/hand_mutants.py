"""Hand-written mutants of the rejection rule: the mistakes a person makes that cosmic-ray's operators cannot write
(a dropped renormalisation, q not carried from one sibling to the next, the bonus from the wrong row). Each is
applied in place, the tests run, and the file is restored; every mutant must be killed.

Usage: python scripts/mutation/hand_mutants.py [--tests "PYTEST ARGS"] [--out reports/mutation/hand_mutants.md]
(default tests: the focused ones of cosmic-ray.toml). Exit 1 when a mutant survives.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERIFY = "specbench/decode/verify.py"


@dataclass(frozen=True)
class HandMutant:
    name: str
    file: str
    old: str
    new: str


MUTANTS = [
    HandMutant("q not renormalised after a rejected sampled sibling leaves it", VERIFY,
               "    return p, _normalised(q, fallback=q)", "    return p, q"),
    HandMutant("q not carried to the next sibling (each sibling judged against the node's first q)", VERIFY,
               "                p, q = rules.after_sampled(p, q, x)", "                p, _ = rules.after_sampled(p, q, x)"),
    HandMutant("rejected sampled sibling stays in q", VERIFY,
               "    q = q.clone()\n    q[x] = 0.0\n", "    q = q.clone()\n"),
    HandMutant("residual p not renormalised after a rejected sampled sibling", VERIFY,
               "    p = _normalised((p - q).clamp_min(0.0), fallback=p)", "    p = (p - q).clamp_min(0.0)"),
    HandMutant("residual without q subtracted (sampled sibling)", VERIFY,
               "    p = _normalised((p - q).clamp_min(0.0), fallback=p)", "    p = p"),
    HandMutant("one-hot sibling: p not renormalised after a rejection", VERIFY,
               "    return _normalised(p, fallback=p)", "    return p"),
    HandMutant("one-hot sibling: a rejected token stays drawable", VERIFY,
               "    p = p.clone()\n    p[x] = 0.0\n", "    p = p.clone()\n"),
    HandMutant("acceptance ratio q/p instead of p/q", VERIFY,
               "if qx > 0 and u < min(1.0, px / qx):", "if px > 0 and u < min(1.0, qx / px):"),
    HandMutant("residual after all siblings rejected drawn from the unmodified p", VERIFY,
               "            return Walk(path, row, p, rejected_all=True)",
               "            return Walk(path, row, probs[row], rejected_all=True)"),
    HandMutant("bonus after a full path from the unprocessed softmax (the official EAGLE bug until 2025)", VERIFY,
               "    bonus = [torch.multinomial(walk.residual, 1, generator=generator) for walk, generator in zip(walks, generators)]",
               "    bonus = [torch.multinomial(w.residual if w.rejected_all else rows[w.end_row].float().softmax(-1), 1,"
               " generator=g) for w, g, rows in zip(walks, generators, logits)]"),
    HandMutant("greedy: the bonus is the argmax at the root, not after the path", VERIFY,
               "            return Verdict(path, token)", "            return Verdict(path, best(0))"),
    HandMutant("greedy, batch: every row reads the batch's first row's argmaxes", VERIFY,
               "best[start : start + rows.shape[0]].__getitem__", "best[0 : rows.shape[0]].__getitem__"),
    HandMutant("gathered one-hot: a rejected token stays drawable", VERIFY,
               "            px = 0.0 if x in rejected else p_at[child]", "            px = p_at[child]"),
    HandMutant("gathered one-hot: the rejected mass is not taken off (no renormalisation)", VERIFY,
               "                mass -= px\n", "                pass\n"),
    HandMutant("gathered one-hot: residual after all siblings rejected drawn from the unmodified p", VERIFY,
               "            return Walk(path, row, _normalised(residual, fallback=residual), rejected_all=True)",
               "            return Walk(path, row, probs[row], rejected_all=True)"),
    HandMutant("gathered chain: acceptance ratio q/p instead of p/q", VERIFY,
               "u < min(1.0, p_at[child] / q_at[child])", "u < min(1.0, q_at[child] / max(p_at[child], 1e-9))"),
    HandMutant("batch, T>0: every row's bonus drawn with the first row's generator", VERIFY,
               "for walk, generator in zip(walks, generators)]", "for walk, generator in zip(walks, [generators[0]] * len(walks))]"),
    HandMutant("emission: the bonus token is dropped after a full path", "specbench/decode/engine.py",
               "    emitted = ([draft.tokens[i] for i in verdict.path] + [verdict.bonus])[:remaining]",
               "    emitted = ([draft.tokens[i] for i in verdict.path] or [verdict.bonus])[:remaining]"),
    HandMutant("emission: the stop id is not kept", "specbench/decode/engine.py",
               "            return emitted[: j + 1], True", "            return emitted[:j], True"),
]


def test_command() -> str:
    """The focused test command of cosmic-ray.toml."""
    return re.search(r'^test-command = "(.*)"', (HERE / "cosmic-ray.toml").read_text(), flags=re.M).group(1)


def first_failure(output: str) -> str:
    """The first failing or erroring test named in pytest's short summary, or ''."""
    found = re.findall(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", output, flags=re.M)
    return found[0] if found else ""


def focused_tests() -> str:
    return test_command().split("pytest", 1)[1]


def run(mutant: HandMutant, tests: str) -> tuple[bool, str, float]:
    path = Path(mutant.file)
    original = path.read_text()
    if original.count(mutant.old) != 1:
        raise SystemExit(f"hand_mutants.py: error: {mutant.name!r}: its line is not in {mutant.file} exactly once")
    started = time.perf_counter()
    try:
        path.write_text(original.replace(mutant.old, mutant.new))
        done = subprocess.run([sys.executable, "-m", "pytest", *shlex.split(tests)], capture_output=True, text=True,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    finally:
        path.write_text(original)
    return done.returncode != 0, first_failure(done.stdout), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", default=focused_tests(), help="pytest arguments (default: the focused tests)")
    parser.add_argument("--only", default="", help="run only the mutants whose name contains this")
    parser.add_argument("--out", type=Path, default=None, help="write a Markdown table here")
    args = parser.parse_args()
    rows = ["| mutant | file | outcome | first failing test | seconds |", "|---|---|---|---|---:|"]
    survived = 0
    for mutant in MUTANTS:
        if args.only not in mutant.name:
            continue
        killed, test, seconds = run(mutant, args.tests)
        survived += not killed
        rows.append(f"| {mutant.name} | {mutant.file} | {'killed' if killed else 'SURVIVED'} | {test} | "
                    f"{seconds:.0f} |")
        print(rows[-1], flush=True)
    text = f"Tests: `pytest {args.tests.strip()}`\n\n" + "\n".join(rows) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    sys.exit(1 if survived else 0)


if __name__ == "__main__":
    main()
