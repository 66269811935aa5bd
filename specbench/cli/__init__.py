"""python -m specbench run | tune | report | export | check | list | doctor | bench | costs | train | distill | datastore |
tasks"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from specbench.cli.commands import COMMANDS
from specbench.cli.parser import parser
from specbench.errors import SpecbenchError


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except SpecbenchError as exc:
        print(f"specbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specbench: interrupted (finished records are kept; rerun with the same --out to resume)",
              file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output left (`specbench list | head`): no message, as a shell tool
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit flush cannot fail too
        return 141  # 128 + SIGPIPE
    except OSError as exc:  # the disk, not the input: a full disk, no permission, a folder removed under us
        resume = "; finished records are kept: rerun the same command to resume" if args.command == "run" else ""
        print(f"specbench: error: {os_error(exc)}{resume}", file=sys.stderr)
        return 1


def os_error(exc: OSError) -> str:
    """One line for a failed file operation: what failed on which file."""
    path = Path(exc.filename) if exc.filename else None
    reason = exc.strerror or str(exc)
    if path is None:
        return reason
    if isinstance(exc, FileNotFoundError) and not path.parent.exists():
        return f"{path.parent} vanished ({reason}: {path})"
    return f"{reason}: {path}"
