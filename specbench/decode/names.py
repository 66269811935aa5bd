"""Names the command line offers before torch is imported (its choices and defaults), defined here once: the
target's runtime (specbench.decode.runtime) and the default target (specbench.decode.target)."""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TARGET = "smollm2-135m-instruct"
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
