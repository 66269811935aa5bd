"""specbench: a benchmark harness for speculative decoding. The command line is `python -m specbench`; the Python
API (specbench.api) is load_target, load_method and generate, imported on first use so that `specbench list` and
`--help` stay fast."""
from __future__ import annotations

from importlib import metadata


def _version() -> str:
    try:
        return metadata.version("specbench")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


__version__ = _version()
__all__ = ["__version__", "generate", "load_method", "load_target"]


def __getattr__(name: str):
    if name in ("generate", "load_method", "load_target", "Result"):
        from specbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'specbench' has no attribute {name!r}")
