"""A disk that fills up: os.write / os.fdatasync wrappers for fault-injection tests."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest


class Disk:
    """os.write / os.fdatasync on files under ``root`` as on a disk with ``room`` bytes left.

    A write that does not fit is cut short, the next one fails with ENOSPC, as the kernel
    does. ``room = None`` is unlimited; ``fsync_errors`` fail that many fsyncs with EIO.
    With ``fsync_gate`` set to an Event, fsyncs wait for it (``fsync_waiting`` is set when
    one does): a commit held between its writes and its fsync.
    """

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = str(root)
        self.room: int | None = None
        self.fsync_errors = 0
        self.fsync_gate: threading.Event | None = None
        self.fsync_waiting = threading.Event()
        self._write = os.write
        self._fdatasync = os.fdatasync
        monkeypatch.setattr(os, "write", self.write)
        monkeypatch.setattr(os, "fdatasync", self.fdatasync)

    def _ours(self, fd: int) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{fd}").startswith(self.root)
        except OSError:
            return False

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if self.room is None or not self._ours(fd):
            return self._write(fd, data)
        if self.room == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = self._write(fd, memoryview(data)[: self.room])
        self.room -= n
        return n

    def fdatasync(self, fd: int) -> None:
        gate = self.fsync_gate
        if gate is not None and self._ours(fd):
            self.fsync_waiting.set()
            gate.wait(30)
        if self.fsync_errors and self._ours(fd):
            self.fsync_errors -= 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        self._fdatasync(fd)
