"""The command line's parser: the top level, and each command's arguments from the module that handles it."""
from __future__ import annotations

import argparse
import re
from typing import NoReturn

from specbench import __version__
from specbench.cli.commands import PARSERS
from specbench.method import closest


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line (with the closest choice for a misspelled one) instead of the
    usage block: `specbench runn` says "did you mean run?"."""

    def error(self, message: str) -> NoReturn:
        match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if match:
            choices = re.findall(r"'([^']*)'", match.group(2))
            message += closest(match.group(1), choices)
        self.exit(2, f"{self.prog}: error: {message} (--help: the usage)\n")


def parser() -> argparse.ArgumentParser:
    top = Parser(prog="specbench", description="Benchmark harness for speculative decoding",
                 epilog="example: python -m specbench run --methods vanilla,eagle,pld --tasks gsm8k --limit 2 "
                        "--max-new-tokens 64 --temperatures 0")
    top.add_argument("--version", action="version", version=f"specbench {__version__}")
    sub = top.add_subparsers(dest="command", required=True)
    for add in PARSERS:
        add(sub)
    return top
