"""What verification and drafting cost on this machine, fixed when a run starts: what tree sizes are worth it.

On a GPU, verifying 60 tokens costs about as much as one; on a 2-core CPU 16 tokens cost about twice one. Methods
that size their trees from these costs adapt to the machine instead of carrying GPU defaults. Where a run's costs
come from, first found first: the run's own run.json (a resumed run decides as it started), `--cost-curve FILE`,
this machine's stored costs (cost_store(): the first run on a machine, target, dtype, runtime and thread count
measures them and every later run there reuses them, so a busy neighbour during a later run's start cannot move
its decisions; a run that starts beside other work measures for itself and stores nothing), or a measurement now.
Every cost-based choice while decoding reads these fixed costs: nothing that decides what is drafted reads the
clock, so the same seed, settings and costs give the same tokens and accept lengths on a loaded or an idle machine.
A curve measured on another machine is that machine's and may decide otherwise.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from specbench.errors import SpecbenchError

SIZES = [1, 2, 4, 8, 12, 16, 24, 32]  # tokens per forward at which the curve is measured
NOISE_FLOOR = 0.10  # timings of one forward closer than this (relative) are the same on a quiet shared machine


def noise(spread: float) -> float:
    """How far apart two timings of one forward may be on this machine and still be the same."""
    return max(NOISE_FLOOR, spread)


@dataclass(frozen=True)
class CostCurve:
    sizes: list[int]  # tokens verified in one forward, ascending, starting at 1
    seconds: list[float]  # time of one forward with that many new tokens

    def at(self, n: int) -> float:
        """Seconds for a forward of n new tokens, linearly interpolated (extrapolated past the last size)."""
        sizes, secs = self.sizes, self.seconds
        if n <= sizes[0]:
            return secs[0]
        for (a, ta), (b, tb) in zip(zip(sizes, secs), zip(sizes[1:], secs[1:])):
            if n <= b:
                return ta + (tb - ta) * (n - a) / (b - a)
        a, b = sizes[-2], sizes[-1]
        return secs[-1] + (secs[-1] - secs[-2]) * (n - b) / (b - a)


@dataclass(frozen=True)
class Measurement:
    """When, how and under what load a curve was measured: stored with it, shown by `costs show`, and in run.json."""
    finished: str  # UTC, ISO 8601
    started: str
    how: str
    loads: list[float]  # other processes' share of the CPUs over each kept round
    dropped: list[float]  # each busy reading's load (the rounds it covered were measured again)
    spread: float  # the largest disagreement between rounds (relative)
    probe_ms: float | None  # T(1) re-probed after the rounds (None: refused before the re-probe)
    attempts: int
    problem: str | None = None  # why the curve was refused (then it is never stored); None: it passed its checks

    @property
    def noise(self) -> float:
        return noise(self.spread)

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["loads"] = [round(x, 3) for x in self.loads]
        values["dropped"] = [round(x, 3) for x in self.dropped]
        values["spread"] = round(self.spread, 4)
        values["probe_ms"] = None if self.probe_ms is None else round(self.probe_ms, 4)
        return {k: v for k, v in values.items() if v is not None}

    @staticmethod
    def from_dict(raw: Any) -> "Measurement | None":
        if not isinstance(raw, dict):
            return None
        known = {k: raw[k] for k in Measurement.__dataclass_fields__ if k in raw}
        try:
            return Measurement(**known)
        except TypeError:
            return None

    def describe(self) -> str:
        load = f"others' load {max(self.loads):.0%} at most over {len(self.loads)} rounds" if self.loads else "load unread"
        dropped = f", rounds measured again {len(self.dropped)} times for load" if self.dropped else ""
        verdict = f"; REFUSED: {self.problem}" if self.problem else ""
        probe = f", T(1) re-probed {self.probe_ms:.2f} ms" if self.probe_ms is not None else ""
        return (f"measured {self.finished} ({self.how}); {load}{dropped}; spread {self.spread:.1%}{probe}; "
                f"attempt {self.attempts}{verdict}")


@dataclass
class CostModel:
    """The costs a run decides with: the target's tree-masked verification curve, and per drafter the time of one
    unit of drafting work (e.g. one EAGLE tree level), measured by the method when it is first built."""

    target: str
    device: str
    cpu: str
    verify: CostCurve
    drafting: dict[str, float] = field(default_factory=dict)  # seconds, by a key the method chooses
    # The device's copy bandwidth (GB/s, read + written; run.decoder.measure_copy_bandwidth): the report's
    # roofline limit, decides nothing. None in costs stored before it was measured.
    copy_gbps: float | None = None
    measured: Measurement | None = None  # when, how, under what load the curve was measured (None: before kept)
    source: str | None = None  # where a run's costs came from (run.json only: a stored file, --cost-curve, measured)

    def drafting_cost(self, key: str, measure: Callable[[], float]) -> float:
        """The stored cost for key, or measure it now (once per run) and store it."""
        if key not in self.drafting:
            self.drafting[key] = float(measure())
        return self.drafting[key]

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "device": self.device, "cpu": self.cpu, "sizes": self.verify.sizes,
                "verify_ms": [round(s * 1000, 4) for s in self.verify.seconds],
                "drafting_ms": {k: round(v * 1000, 4) for k, v in self.drafting.items()},
                **({"copy_gbps": round(self.copy_gbps, 3)} if self.copy_gbps is not None else {}),
                **({"measured": self.measured.to_dict()} if self.measured is not None else {}),
                **({"source": self.source} if self.source is not None else {})}

    @staticmethod
    def from_dict(raw: Any, origin: str) -> "CostModel":
        try:
            sizes, ms = [int(s) for s in raw["sizes"]], [float(t) for t in raw["verify_ms"]]
            if len(sizes) != len(ms) or len(sizes) < 2 or sizes != sorted(set(sizes)) or sizes[0] != 1:
                raise ValueError("sizes must be ascending from 1, one time per size")
            return CostModel(str(raw["target"]), str(raw.get("device", "?")), str(raw.get("cpu", "?")),
                             CostCurve(sizes, [t / 1000 for t in ms]),
                             {str(k): float(v) / 1000 for k, v in (raw.get("drafting_ms") or {}).items()},
                             float(raw["copy_gbps"]) if raw.get("copy_gbps") is not None else None,
                             Measurement.from_dict(raw.get("measured")), raw.get("source"))
        except (KeyError, TypeError, ValueError) as exc:
            raise SpecbenchError(f"{origin}: not a cost curve ({exc})") from None


def read_cost_model(path: Path, target: str) -> CostModel:
    """A cost model from a file: a run's run.json, a `bench --cost --json` file, or a bare cost model."""
    if not path.is_file():
        raise SpecbenchError(f"--cost-curve {path}: no such file")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpecbenchError(f"--cost-curve {path}: not JSON ({exc})") from None
    if isinstance(raw, dict) and isinstance(raw.get("costs"), dict):
        raw = raw["costs"]
    model = CostModel.from_dict(raw, f"--cost-curve {path}")
    if model.target != target:
        raise SpecbenchError(f"--cost-curve {path} was measured for target {model.target!r}, not {target!r}")
    return model
