"""The command line's parser: the top level, and each command's arguments from the module that handles it."""
from __future__ import annotations

import argparse

from specbench import __version__
from specbench.cli.commands import PARSERS


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="specbench", description="Benchmark harness for speculative decoding",
                                  epilog="example: python -m specbench run --methods vanilla,eagle,pld --tasks gsm8k "
                                         "--limit 2 --max-new-tokens 64 --temperatures 0")
    top.add_argument("--version", action="version", version=f"specbench {__version__}")
    sub = top.add_subparsers(dest="command", required=True)
    for add in PARSERS:
        add(sub)
    return top
