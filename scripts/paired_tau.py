"""Paired comparison of two methods' accepted length: mean per-turn τ difference with a 95% Student-t interval.

Both methods answered the same turns of one run, so the per-turn difference removes the spread between questions
(which dwarfs the spread between similar heads). Usage:
    python scripts/paired_tau.py RUN_DIR METHOD_A METHOD_B [METHOD_A METHOD_B ...] [--temperature 0]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

from scipy.stats import t as student_t

from specbench.errors import SpecbenchError
from specbench.run.record import Record
from specbench.run.records import read_records


def per_turn_tau(records: list[Record], method: str, temperature: float) -> dict[tuple, float]:
    """τ of every turn (tokens emitted / target forwards) of `method`, keyed by task, question, repeat and turn."""
    taus = {}
    for record in records:
        if record.method != method or record.temperature != temperature:
            continue
        for turn, lengths in enumerate(record.choice.accept_lengths):
            if lengths:
                key = (record.task, str(record.question_id), record.repeat, turn)
                taus[key] = sum(lengths) / len(lengths)
    return taus


def tuned_keys(name: str) -> set[str]:
    """The option keys `tune` chooses for a method (its declared settings'), which --settings adds to a label."""
    from specbench.method import parse_options
    from specbench.run.registry import available_methods

    info = available_methods().get(name.partition("@")[0])
    return {k for option in (info.tuning if info else ()) for k in parse_options(f"x@{option}")}


def resolve(records: list[Record], name: str) -> str:
    """A method label of the run: NAME itself, or the one label that is NAME with tuned options added by --settings
    (pld -> pld@num_tokens=6, and pld@rule=hf -> pld@rule=hf:num_tokens=6, not the other)."""
    from specbench.method import parse_options

    labels = {r.method for r in records}
    if name in labels:
        return name
    base, given, tuned = name.partition("@")[0], parse_options(name), tuned_keys(name)
    matches = sorted(label for label in labels if label.partition("@")[0] == base
                     and {k: v for k, v in parse_options(label).items() if (k not in tuned and k != "head") or k in given} == given)
    if len(matches) != 1:
        sys.exit(f"paired_tau: {name} matches {len(matches)} methods of the run ({', '.join(matches) or 'none'})")
    return matches[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("methods", nargs="+", help="pairs: A B [A B ...]; prints A - B")
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args()
    if len(args.methods) % 2:
        sys.exit("paired_tau: give methods in pairs (A B [A B ...])")
    try:
        records = read_records(args.run_dir)
    except SpecbenchError as exc:
        sys.exit(f"paired_tau: {exc}")
    for a, b in zip(args.methods[::2], args.methods[1::2]):
        a, b = resolve(records, a), resolve(records, b)
        tau_a, tau_b = per_turn_tau(records, a, args.temperature), per_turn_tau(records, b, args.temperature)
        shared = sorted(tau_a.keys() & tau_b.keys())
        if len(shared) < 2:
            sys.exit(f"paired_tau: {a} and {b} share {len(shared)} turns at T={args.temperature} in {args.run_dir}")
        diffs = [tau_a[k] - tau_b[k] for k in shared]
        half = student_t.ppf(0.975, len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
        print(f"{a} - {b}: {statistics.mean(diffs):+.3f} ± {half:.3f} (95%, {len(diffs)} paired turns)")


if __name__ == "__main__":
    main()
