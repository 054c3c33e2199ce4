"""The server reuses the memory of its last large message for the next one (glibc's malloc
would otherwise hand each freed buffer back to the kernel and fault in fresh pages for every
message of more than 128 KiB: tidings.server.allocator)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from tests.harness import start_tidings
from tests.harness.rawnats import CONNECT_PLAIN, RawConn
from tidings.server.allocator import give_back_periodically

from .conftest import NO_STREAMING

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc")


def minor_faults(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def test_large_messages_do_not_fault_in_fresh_pages() -> None:
    server = start_tidings(extra_args=NO_STREAMING)
    size, count = 900 * 1024, 60
    frame = b"PUB big %d\r\n%b\r\n" % (size, b"x" * size)
    try:
        with RawConn(server.port) as sub, RawConn(server.port) as pub:
            sub.connect(CONNECT_PLAIN)
            pub.connect(CONNECT_PLAIN)
            sub.send(b"SUB big 1\r\n")
            sub.barrier()
            for _ in range(5):  # the buffers' first use may fault; steady state is measured
                pub.send(frame)
            pub.barrier()
            assert sub.count_msgs(5) == 5
            before = minor_faults(server.pid)
            for i in range(count):  # one at a time, as requests and their replies go
                pub.send(frame)
                assert sub.count_msgs(6 + i) == 6 + i
            faults = minor_faults(server.pid) - before
    finally:
        server.stop()
    # Fresh buffers for each message were ~430 faults a message (its 225 pages, twice).
    assert faults < count * 10, f"{faults} page faults for {count} messages of {size} bytes"


GIVE_BACK = """
import os
from tidings.bench.procstat import memory_kib
from tidings.server.allocator import keep_freed_memory

def rss_mib():
    return memory_kib(os.getpid())["VmRSS"] // 1024

give_back = keep_freed_memory()
assert give_back is not None
kept, freed = [], []
for i in range(80_000):  # ~80 MiB, with small survivors among it (a fragmented heap)
    freed.append(b"x" * 1000 + bytes([i % 256]))
    if i % 50 == 0:
        kept.append(b"k" * 200)
del freed
before = rss_mib()
give_back()
print(before, rss_mib())
"""


def test_what_a_burst_left_free_is_given_back() -> None:
    out = subprocess.run([sys.executable, "-c", GIVE_BACK], capture_output=True, text=True,
                         timeout=60, check=True)
    before, after = map(int, out.stdout.split())
    assert before - after > 40, (before, after)  # MiB


async def test_give_back_runs_every_interval() -> None:
    calls = 0
    enough = asyncio.Event()

    def give_back() -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            enough.set()

    task = asyncio.ensure_future(give_back_periodically(give_back, every=0.01))
    try:
        await asyncio.wait_for(enough.wait(), 5)
    finally:
        task.cancel()
