"""Names the command line offers before torch is imported (its choices and defaults), defined here once: the
target's runtimes (specbench.decode.runtime) and the default target (specbench.decode.target)."""
from __future__ import annotations

RUNTIMES = ("auto", "fast", "stock", "compiled", "eager")
DEFAULT_TARGET = "smollm2-135m-instruct"
