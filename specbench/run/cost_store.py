"""This machine's stored costs: the first idle run on a machine, target, dtype, runtime and thread count measures
them and every later run there reuses them (specbench.decode.cost_model says why)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from specbench.cache import cache_root
from specbench.decode.cost_model import CostModel
from specbench.errors import SpecbenchError
from specbench.run.records import write_json


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
    """Where measured costs are kept: cache_root()/costs."""
    return cache_root() / "costs"


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
