"""A disk that fills up: os.write / os.fdatasync wrappers for fault-injection tests."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
import subprocess
import threading
from collections.abc import Iterator
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


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` (made) for the test (skipped where it cannot be
    mounted): a real disk that fills up."""
    path.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Writes past `limit` bytes of a file fail with EFBIG, as writes to a full disk fail."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)
