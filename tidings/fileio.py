"""Low-level file writing the stores share (NATS Streaming's and JetStream's): a write that
writes everything, and the fsync of a directory (so that a new or renamed file stays)."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path | str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
