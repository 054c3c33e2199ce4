"""A large object through nats-py's object store, into a file-storage tidings server: the
server streams it to disk and back without holding it whole (issue 25: "large objects streamed
through without holding them whole in memory (check the server's memory while a 1 GiB object
is put and read back)").

The object is made as it is sent (random bytes, 128 KiB at a time) and hashed as it is read
back, so that the test process does not hold it either.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import nats
import pytest
from nats.js.api import StorageType

from tests.harness import start_tidings

pytestmark = [
    pytest.mark.timeout(300),
    # serial: a gigabyte through the server and the disk, which the tests beside it would
    # slow down (and be slowed by); make test runs it alone
    pytest.mark.serial,
]

MIB = 1 << 20
OBJECT_SIZE = 1024 * MIB
GROWTH = 64 * MIB  # what the server's peak resident memory may grow by, at most


class RandomSource(io.RawIOBase):
    """`size` random bytes, made as they are read, and their SHA-256."""

    def __init__(self, size: int) -> None:
        self.left = size
        self.sha = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self.left)
        chunk = os.urandom(n)
        buffer[:n] = chunk
        self.sha.update(chunk)
        self.left -= n
        return n


class HashingSink:
    """Where the object get writes its chunks: hashed and counted, not kept."""

    def __init__(self) -> None:
        self.size = 0
        self.sha = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return len(data)


def memory_kib(pid: int) -> dict[str, int]:
    """VmHWM (peak) and VmRSS of a process, in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(value.split()[0])
    return out


async def test_a_large_object_is_streamed_through_the_server(tmp_path: Path) -> None:
    srv = start_tidings(extra_args=["-js", "-sd", str(tmp_path / "js")], streaming=False)
    nc = await nats.connect(srv.url)
    try:
        js = nc.jetstream(timeout=60)
        store = await js.create_object_store("BIG", storage=StorageType.FILE)
        assert srv.pid is not None
        before = memory_kib(srv.pid)["VmHWM"]
        source = RandomSource(OBJECT_SIZE)
        info = await store.put("big.bin", source)  # type: ignore[arg-type]
        after_put = memory_kib(srv.pid)["VmHWM"]
        sink = HashingSink()
        await store.get("big.bin", writeinto=sink)  # type: ignore[arg-type]
        after_get = memory_kib(srv.pid)["VmHWM"]
    finally:
        await nc.close()
        srv.stop()
    assert info.size == OBJECT_SIZE
    assert sink.size == OBJECT_SIZE
    assert sink.sha.hexdigest() == source.sha.hexdigest()
    assert (after_put - before) * 1024 < GROWTH, (before, after_put)
    assert (after_get - before) * 1024 < GROWTH, (before, after_get)
