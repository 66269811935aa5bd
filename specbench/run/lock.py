"""One writer per folder. `run` holds its run folder's lock while it decodes (single process and Ray driver alike)
and `report` holds its report folder's while it writes tables, so a second command on the same folder (another
terminal, a retried job script, a second Ray driver) stops with one line naming the holder instead of decoding
the same questions and appending duplicate records.

The lock is an OS file lock (filelock: flock on POSIX), so the kernel releases it when its process ends, crash
and SIGKILL included: resuming after a crash needs no cleanup. Who holds it is written beside it for the message.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout

from specbench.errors import SpecbenchError
from specbench.run.records import command_line

LOCK = ".specbench.lock"
OWNER = ".specbench.owner.json"


def holder(folder: Path) -> str:
    """Who holds the folder's lock, as its owner file says (best effort: it is written just after locking)."""
    try:
        owner = json.loads((folder / OWNER).read_text(encoding="utf-8"))
        return f"pid {owner['pid']} on {owner['host']} (since {owner['since']}: {owner['command']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


@contextmanager
def folder_lock(folder: Path, role: str) -> Iterator[None]:
    """Hold `folder`'s writer lock for the block (creating the folder); refuse at once if another process holds
    it. `role` names the folder in the message ("run folder", "report folder"). A folder this lock created and
    nothing was written in (a run refused as it loaded) is removed again with its lock file."""
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(folder / LOCK, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise SpecbenchError(f"{role} {folder} is being written by {holder(folder)}; wait for it to finish or use "
                             "another folder") from None
    try:
        owner = {"pid": os.getpid(), "host": socket.gethostname(),
                 "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 "command": command_line()}
        (folder / OWNER).write_text(json.dumps(owner), encoding="utf-8")
        yield
    finally:
        (folder / OWNER).unlink(missing_ok=True)
        lock.release()
        if created:
            remove_if_empty(folder)


def remove_if_empty(folder: Path) -> None:
    """Remove a folder that holds nothing but its lock file; nothing else (a folder vanished meanwhile, or taken by
    another process, stays as it is: the error in flight, if any, is the one to report)."""
    with contextlib.suppress(OSError):
        if {p.name for p in folder.iterdir()} <= {LOCK}:
            (folder / LOCK).unlink(missing_ok=True)
            folder.rmdir()
