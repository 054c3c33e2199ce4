"""An exclusive, advisory lock file that keeps a second server off a store.

The file holds the owner's pid so that the refusal can name it. The lock is an ``flock``,
released by the kernel when the process dies, so a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .base import StoreLockedError


def lock_store(path: Path, what: str) -> int:
    """flock ``path`` (created if needed) and write our pid into it; returns its descriptor.

    Raises :class:`StoreLockedError` "<what> is in use by another server (pid N)" when
    another process holds it.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        finally:
            os.close(fd)
        raise StoreLockedError(f"{what} is in use by another server (pid {owner})") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def unlock_store(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
