"""Acceptance profiles: each method's measured acceptance as a `speculation_profile.json` (the schema, version 1.0,
of NVIDIA Model-Optimizer's examples/specdec_bench/speculation_profile.py, which vLLM's synthetic rejection sampler
and other simulators replay), and the rates `run --synthetic-acceptance FILE` replays from such a file.

From a run's records, per method, temperature (and batch size, where the run has several): every decoding step's
accepted length (tokens emitted by one target forward, the bonus token included, so 1 = no drafted token accepted):
- acceptance_length_histogram: steps per accepted length (their sum is the number of steps);
- marginal_accept_rates[i]: the share of steps that accepted at least i + 1 drafted tokens (P(length >= i + 2));
- conditional_accept_rates[i]: marginal[i] / marginal[i - 1] (marginal[0] for i = 0; 0 where marginal[i - 1] is 0),
  the chance that drafted token i + 1 is accepted given that tokens 1..i were;
- mean_accept_length: tokens per step, the report's τ; mean_accept_length_per_request: the mean of each turn's;
- num_speculative_tokens: the vectors' length, the most drafted tokens any step accepted (records do not keep how
  deep a drafter drafted; past it no step accepted anything, so every rate there is 0);
- per_category: the same vectors, histogram and means over the steps of each question category (the question's
  category, else its task).
Every step counts, the first of each turn included (its forward also reads the prompt), as τ counts them.

Replaying (docs/measuring.md, "Acceptance profiles"): the conditional rates, then 0 past num_speculative_tokens
(no deeper acceptance was measured), per category where the profile has that category's conditional rates, else
the overall ones."""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbench.errors import SpecbenchError
from specbench.run.record import Record
from specbench.run.registry import REFERENCES
from specbench.run.run_info import RunInfo
from specbench.run.timing_only import run_timing_only

SCHEMA_VERSION = "1.0"
PROFILE_DIR = "profiles"  # the report folder's subfolder the profiles go into
DIGITS = 6  # rates and means are rounded to this many decimals, as the schema's producer does
TOLERANCE = 0.02  # the schema's mean_consistency tolerance (tokens per step)


@dataclass(frozen=True)
class Acceptance:
    """Accepted lengths of decoding steps (1 = nothing drafted accepted), summarised at K positions."""
    histogram: dict[int, int]  # accepted length -> steps
    per_turn_means: list[float] = field(default_factory=list)

    @staticmethod
    def of(turns: list[list[int]]) -> "Acceptance":
        lengths = Counter(a for turn in turns for a in turn)
        return Acceptance(dict(sorted(lengths.items())), [sum(turn) / len(turn) for turn in turns if turn])

    @property
    def steps(self) -> int:
        return sum(self.histogram.values())

    @property
    def deepest(self) -> int:
        """The most drafted tokens any step accepted."""
        return max(self.histogram, default=1) - 1

    def mean(self) -> float:
        return sum(length * n for length, n in self.histogram.items()) / self.steps if self.steps else 0.0

    def marginal(self, k: int) -> list[float]:
        """P(at least i drafted tokens accepted), i = 1..k."""
        return [sum(n for length, n in self.histogram.items() if length >= i + 1) / self.steps if self.steps else 0.0
                for i in range(1, k + 1)]

    def summary(self, k: int) -> dict[str, Any]:
        marginal = self.marginal(k)
        return {
            "conditional_accept_rates": [round(r, DIGITS) for r in conditional(marginal)],
            "marginal_accept_rates": [round(r, DIGITS) for r in marginal],
            "mean_accept_length": round(self.mean(), DIGITS),
            "mean_accept_length_per_request": round(sum(self.per_turn_means) / len(self.per_turn_means), DIGITS)
            if self.per_turn_means else None,
            "acceptance_length_histogram": {str(length): n for length, n in self.histogram.items()},
            "steps": self.steps,
        }


def conditional(marginal: list[float]) -> list[float]:
    """Conditional per-position rates from marginal ones (0 where the previous marginal is 0)."""
    previous = [1.0, *marginal[:-1]]
    return [m / p if p > 0 else 0.0 for m, p in zip(marginal, previous)]


def validation(mean: float, marginal: list[float]) -> dict[str, Any]:
    """The schema's checks: τ = 1 + the sum of the marginals (within TOLERANCE), and non-increasing marginals."""
    implied = 1.0 + sum(marginal)
    violations = [{"position": i, "value": marginal[i], "previous": marginal[i - 1]}
                  for i in range(1, len(marginal)) if marginal[i] > marginal[i - 1] + 1e-9]
    return {
        "mean_consistency": {"implied_mean_accept_length": round(implied, DIGITS),
                             "reported_mean_accept_length": round(mean, DIGITS),
                             "abs_delta": round(abs(implied - mean), DIGITS), "tolerance": TOLERANCE,
                             "passed": abs(implied - mean) <= TOLERANCE},
        "marginal_monotonicity": {"passed": not violations, "violations": violations},
    }


def build_profile(records: list[Record], info: RunInfo) -> dict[str, Any]:
    """One method's profile (records of one method, temperature and batch size) in the schema's layout."""
    first = records[0]
    overall = Acceptance.of([turn for r in records for turn in r.choice.accept_lengths])
    k = max(1, overall.deepest)
    by_category: dict[str, list[list[int]]] = {}
    for r in records:
        by_category.setdefault(r.task_category, []).extend(r.choice.accept_lengths)
    summary = overall.summary(k)
    return {
        "schema_version": SCHEMA_VERSION,
        "measured": overall.steps > 0,
        "method": first.method.partition("@")[0],
        "draft_checkpoint": {"method": first.method, "options": first.options},
        "target_model": {"name": first.target},
        "num_speculative_tokens": k,
        "block_size": None,
        "max_supported_k": k,
        "verification_method": "longest_prefix",
        "conditional_accept_rates": summary["conditional_accept_rates"],
        "marginal_accept_rates": summary["marginal_accept_rates"],
        "mean_accept_length": summary["mean_accept_length"],
        "mean_accept_length_per_request": summary["mean_accept_length_per_request"],
        # measured at the run's own settings (trees re-plan with their budget): not extrapolated over K
        "accept_length_model": "measured_per_k",
        "accept_length_by_k": {str(k): summary["mean_accept_length"]},
        "acceptance_length_histogram": summary["acceptance_length_histogram"],
        "per_category": {name: Acceptance.of(turns).summary(k) for name, turns in sorted(by_category.items())},
        "measurement_conditions": {
            "producer": "specbench report", "run_started": info.started or None,
            "temperature": first.temperature, "top_p": first.top_p, "top_k": first.top_k,
            "batch_size": first.batch_size, "seed": first.seed, "max_new_tokens": sorted({r.max_new_tokens
                                                                                         for r in records}),
            "tasks": sorted({r.task for r in records}), "questions": len(records), "steps": overall.steps,
            "device": first.worker.device if first.worker else None, "lossless": first.lossless,
            "timing_only": run_timing_only(info.settings),
        },
        "validation": validation(overall.mean(), overall.marginal(k)),
    }


def profile_name(method: str, temperature: float, batch_size: int | None) -> str:
    """speculation_profile_<method>_T<t>[_B<b>].json, any options of the method's in a file-safe form."""
    safe = re.sub(r"[^A-Za-z0-9._=-]+", "_", method)
    return f"speculation_profile_{safe}_T{temperature:g}" + (f"_B{batch_size}" if batch_size else "") + ".json"


def write_profiles(records: list[Record], info: RunInfo, out_dir: Path) -> list[Path]:
    """Every drafting method's profile (not vanilla's, not reference rows') into out_dir/profiles/."""
    groups: dict[tuple[str, float, int], list[Record]] = {}
    for r in records:
        if r.method.partition("@")[0] != "vanilla" and r.method not in REFERENCES:
            groups.setdefault((r.method, r.temperature, r.batch_size), []).append(r)
    several_sizes = len({r.batch_size for r in records}) > 1
    plain = Counter(method.partition("@")[0] for method in {key[0] for key in groups})
    written = []
    for (method, temperature, size), part in sorted(groups.items()):
        name = method.partition("@")[0] if plain[method.partition("@")[0]] == 1 else method  # options where needed
        path = out_dir / PROFILE_DIR / profile_name(name, temperature, size if several_sizes else None)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(build_profile(part, info), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(path)
    return written


def profiles_line(written: list[Path]) -> str:
    """What `report` prints about the profiles it wrote."""
    return f"\n\nacceptance profiles ({PROFILE_DIR}/): {', '.join(p.name for p in written)}" if written else ""


@dataclass(frozen=True)
class ReplayRates:
    """The conditional per-position rates a profile replays: overall, and per category where it has them."""
    overall: list[float]
    categories: dict[str, list[float]] = field(default_factory=dict)


def replay_vector(raw: Any, where: str) -> list[float]:
    """A profile's conditional rates as replayed: each in [0, 1], then 0 past the last (nothing deeper measured)."""
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where}: expected a non-empty list of rates")
    rates = []
    for value in raw:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 <= value <= 1.0) \
                or math.isnan(value):
            raise ValueError(f"{where}: {value!r} is not a rate in [0, 1]")
        rates.append(float(value))
    return [*rates, 0.0]


def read_replay_rates(path: Path) -> ReplayRates:
    """The rates a speculation_profile.json replays; one SpecbenchError line for a file that is not one."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict) or "conditional_accept_rates" not in raw:
            raise ValueError("no conditional_accept_rates")
        if str(raw.get("schema_version", "")).split(".")[0] != SCHEMA_VERSION.split(".")[0]:
            raise ValueError(f"schema_version {raw.get('schema_version')!r}, expected {SCHEMA_VERSION}")
        if raw.get("measured") is False:
            raise ValueError("measured is false (a placeholder, not a measurement)")
        overall = replay_vector(raw["conditional_accept_rates"], "conditional_accept_rates")
        per_category = raw.get("per_category") or {}
        if not isinstance(per_category, dict):
            raise ValueError("per_category is not an object")
        categories = {str(name): replay_vector(entry["conditional_accept_rates"],
                                               f"per_category.{name}.conditional_accept_rates")
                      for name, entry in per_category.items()
                      if isinstance(entry, dict) and entry.get("conditional_accept_rates") is not None}
    except OSError as exc:
        raise SpecbenchError(f"--synthetic-acceptance {path}: cannot read it ({exc.strerror})") from None
    except ValueError as exc:  # json.JSONDecodeError is one
        raise SpecbenchError(f"--synthetic-acceptance {path}: not a speculation profile ({exc})") from None
    return ReplayRates(overall, categories)
