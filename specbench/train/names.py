"""Names `train` offers before torch is imported, defined here once: the mixed-precision types of --autocast
(specbench.train.training maps each to its torch dtype)."""
from __future__ import annotations

AUTOCAST_NAMES = ("bfloat16",)
