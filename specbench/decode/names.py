"""Names the command line and `costs show` read before torch is imported, defined here once: the target's runtime
(specbench.decode.runtime) with its few-token kernels' rule, the default target (specbench.decode.target) and the
shipped shapes (specbench.decode.shapes), and the sampling settings (specbench.decode.sampling: what every sampled token
is drawn under), checked with the other arguments before torch loads."""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from importlib import resources

DEFAULT_TARGET = "smollm2-135m-instruct"
SHAPE_PREFIX = "shape:"  # --target shape:NAME: random weights of a real model's shape (specbench.decode.shapes)


def is_shape(name: str) -> bool:
    return name.lower().startswith(SHAPE_PREFIX)


def shape_names() -> list[str]:
    """The shapes shipped in the package."""
    return sorted(p.name.removesuffix(".json") for p in resources.files("specbench.shapes").iterdir()
                  if p.name.endswith(".json"))

KERNELS = ("auto", "few-token", "stock", "inductor")  # the CPU's; transformers' modules; their forward torch.compile'd
GRAPHS = ("auto", "on", "off")  # on: bucketed shapes over a cache reserved for the run, captured on CUDA
# The runtime's single names from before the two choices (`--runtime NAME`), kept so that the commands and run folders
# that name them rerun and resume: NAME -> (kernels, graphs). eager: transformers' modules at their own shapes, no
# graphs (the EAGLE and Spec-Bench repositories' protocol).
RUNTIME_NAMES = {"auto": ("auto", "auto"), "fast": ("auto", "off"), "stock": ("stock", "off"),
                 "eager": ("stock", "off"), "compiled": ("auto", "on")}


@dataclass(frozen=True)
class Runtime:
    """How the target's forward runs, two orthogonal choices: the product kernels ("auto": few-token on a CPU, stock
    on a GPU) and CUDA graphs ("auto": on on CUDA; on a CPU "on" runs the same bucketed shapes, uncaptured)."""

    kernels: str = "auto"
    graphs: str = "auto"

    def __post_init__(self) -> None:
        if self.kernels not in KERNELS:
            raise ValueError(f"unknown kernels {self.kernels!r}; valid: {', '.join(KERNELS)}")
        if self.graphs not in GRAPHS:
            raise ValueError(f"unknown graphs choice {self.graphs!r}; valid: {', '.join(GRAPHS)}")

    @staticmethod
    def of(value: "Runtime | str | dict | None") -> "Runtime":
        """A runtime from its typed form, its settings form ({"kernels", "graphs"}) or a single name (RUNTIME_NAMES)."""
        if isinstance(value, Runtime):
            return value
        if value is None:
            return Runtime()
        if isinstance(value, dict):
            return Runtime(value.get("kernels", "auto"), value.get("graphs", "auto"))
        if value not in RUNTIME_NAMES:
            raise ValueError(f"unknown runtime {value!r}; valid: {', '.join(RUNTIME_NAMES)} (or --kernels and --graphs)")
        return Runtime(*RUNTIME_NAMES[value])


PRODUCT_KERNELS = ("pair", "wxt", "packed", "linear")  # the few-token kernels (specbench.decode.runtime)
ROW_COUNTS = (1, 2, 4, 8, 16, 32)  # a rule names a kernel for each; a row count between two takes the larger's


@dataclass(frozen=True)
class KernelRule:
    """The kernel for each of ROW_COUNTS (pair at one row only; packed is F.linear where nothing is packed)."""
    kernels: tuple[str, ...]

    def pick(self, rows: int, max_tokens: int, packed: bool) -> str:
        kernel = self.kernels[bisect_left(ROW_COUNTS, rows)] if 0 < rows <= min(max_tokens, ROW_COUNTS[-1]) else "linear"
        return "linear" if kernel == "packed" and not packed else kernel


FIXED_RULE = KernelRule(("pair", "wxt", "wxt", "packed", "packed", "packed"))  # measured on a 2-core AVX2 EPYC


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k filter

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0
