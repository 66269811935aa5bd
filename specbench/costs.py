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

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import PreTrainedModel

from specbench.draft import Draft
from specbench.engine import tree_inputs
from specbench.errors import SpecbenchError
from specbench.kv import new_cache, truncate_cache
from specbench.layout import AttentionLayout
from specbench.records import write_json
from specbench.runtime import fastest_seconds

SIZES = [1, 2, 4, 8, 12, 16, 24, 32]  # tokens per forward at which the curve is measured
CONTEXT = 256  # cached context tokens before the measured forward


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


@dataclass
class CostModel:
    """The costs a run decides with: the target's tree-masked verification curve, and per drafter the time of one
    unit of drafting work (e.g. one EAGLE tree level), measured by the method when it is first built."""

    target: str
    device: str
    cpu: str
    verify: CostCurve
    drafting: dict[str, float] = field(default_factory=dict)  # seconds, by a key the method chooses

    def drafting_cost(self, key: str, measure: Callable[[], float]) -> float:
        """The stored cost for key, or measure it now (once per run) and store it."""
        if key not in self.drafting:
            self.drafting[key] = float(measure())
        return self.drafting[key]

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "device": self.device, "cpu": self.cpu, "sizes": self.verify.sizes,
                "verify_ms": [round(s * 1000, 4) for s in self.verify.seconds],
                "drafting_ms": {k: round(v * 1000, 4) for k, v in self.drafting.items()}}

    @staticmethod
    def from_dict(raw: Any, origin: str) -> "CostModel":
        try:
            sizes, ms = [int(s) for s in raw["sizes"]], [float(t) for t in raw["verify_ms"]]
            if len(sizes) != len(ms) or len(sizes) < 2 or sizes != sorted(set(sizes)) or sizes[0] != 1:
                raise ValueError("sizes must be ascending from 1, one time per size")
            return CostModel(str(raw["target"]), str(raw.get("device", "?")), str(raw.get("cpu", "?")),
                             CostCurve(sizes, [t / 1000 for t in ms]),
                             {str(k): float(v) / 1000 for k, v in (raw.get("drafting_ms") or {}).items()})
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


def cpu_description() -> str:
    """CPU model and the SIMD flags that decide fp32 GEMM speed (timings are only comparable on equal ones)."""
    model, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown CPU":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        import platform

        model = platform.processor() or platform.machine()
    simd = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "neon") if f in flags]
    return f"{model} [{' '.join(simd) or 'no AVX2'}]"


def bushy_tree(tokens: list[int]) -> Draft:
    """A binary tree over tokens (node i > 0 hangs under node (i - 1) // 2), the kind of shape verification sees."""
    return Draft(list(tokens), [(i - 1) // 2 if i > 0 else -1 for i in range(len(tokens))])


@torch.inference_mode()
def measure_forward_curve(model: PreTrainedModel, sizes: list[int], tree: bool, repeats: int = 5,
                          context: int = CONTEXT) -> CostCurve:
    """Fastest of `repeats` forwards over n new tokens after a cached context, for each n (after one warm-up).
    tree=True: one pending token and n - 1 tree nodes under the engine's 4D tree mask (what verification runs);
    tree=False: n tokens under the model's own causal mask. The minimum is the least load-sensitive statistic."""
    device = model.device
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    cache = new_cache()
    layout = AttentionLayout.of(model.config)
    model(input_ids=torch.randint(0, vocab, (1, context), generator=gen).to(device), past_key_values=cache,
          use_cache=True, logits_to_keep=1)
    seconds = []
    for n in sizes:
        tokens = torch.randint(0, vocab, (n,), generator=gen).tolist()
        draft = bushy_tree(tokens[1:]) if tree else Draft()
        inputs = tree_inputs(tokens[:1] if tree else tokens, draft, context, model.dtype, device, layout)

        def forward() -> None:
            model(input_ids=inputs.input_ids, position_ids=inputs.position_ids,
                  attention_mask=inputs.attention_mask, past_key_values=cache, use_cache=True, logits_to_keep=n)
            truncate_cache(cache, context)

        seconds.append(fastest_seconds(forward, device, repeats))
    return CostCurve(list(sizes), seconds)


def measure_cost_model(model: PreTrainedModel, target: str, rounds: int = 3) -> CostModel:
    """The run's verification curve: per size the fastest over `rounds` passes over all sizes (a busy neighbour on
    a shared machine slows whole seconds at a time; one pass once read T(1) above T(2))."""
    curves = [measure_forward_curve(model, SIZES, tree=True) for _ in range(rounds)]
    fastest = [min(c.seconds[i] for c in curves) for i in range(len(SIZES))]
    return CostModel(target, str(model.device), cpu_description(), CostCurve(list(SIZES), fastest))


@dataclass(frozen=True)
class Machine:
    """What a measured cost model is valid for. Runs on the same machine reuse its stored costs, so a busy
    neighbour during one run's start cannot move what that run drafts; another machine measures its own."""
    target: str
    device: str  # "cpu: <model> [flags]" or "cuda: <GPU name>"
    dtype: str
    runtime: str
    threads: int
    torch: str
    transformers: str

    def path(self) -> Path:
        digest = hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]
        return cost_store() / f"{digest}.json"


def cost_store() -> Path:
    """Where measured costs are kept: $SPECBENCH_CACHE/costs, else $XDG_CACHE_HOME/specbench/costs, else
    ~/.cache/specbench/costs."""
    root = os.environ.get("SPECBENCH_CACHE")
    if not root:
        root = str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specbench")
    return Path(root) / "costs"


def read_stored_costs(machine: Machine) -> CostModel | None:
    path = machine.path()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SpecbenchError(f"{path}: unreadable stored costs ({exc}); delete it to measure anew") from None
    return CostModel.from_dict(raw.get("costs") if isinstance(raw, dict) else None, str(path))


def store_costs(machine: Machine, costs: CostModel) -> str | None:
    """Keep the costs for later runs on this machine; returns a warning when that is not possible (a read-only
    home), in which case each run measures its own."""
    path = machine.path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"machine": asdict(machine), "costs": costs.to_dict()})
    except OSError as exc:
        return f"specbench: warning: cannot store the costs in {path} ({exc.strerror}): later runs measure anew"
    return None
