"""Stores that refuse writes, and stores already in use, behind a real `tidings` server.

A publish is either acknowledged and then survives a restart, or answered with an error
and never stored; a second server on the same store is refused at start.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from tests.faultydisk import Disk, small_tmpfs
from tests.harness import start_tidings
from tidings.streaming.client import StanError
from tidings.streaming.client import connect as stan_connect
from tidings.streaming.stores.file import FileStore

from .conftest import Inbox, StanFactory
from .test_cli import wait_streaming

pytestmark = pytest.mark.timeout(120)

KIB4 = 4096


class Publisher:
    """Publishes numbered messages with async PubAcks and sorts them into acked / nacked."""

    def __init__(self, sc: object, channel: str, size: int) -> None:
        self.sc = sc
        self.channel = channel
        self.size = size
        self.n = 0
        self.acked: set[bytes] = set()
        self.nacked: dict[bytes, str] = {}

    def payload(self, i: int) -> bytes:
        return (b"msg-%d-" % i).ljust(self.size, b".")

    async def wave(self, count: int) -> int:
        """Publish ``count`` messages, wait for every answer; how many were refused."""
        before = len(self.nacked)
        for _ in range(count):
            data = self.payload(self.n)
            self.n += 1

            def handler(guid: str, err: StanError | None, data: bytes = data) -> None:
                if err is None:
                    self.acked.add(data)
                else:
                    self.nacked[data] = str(err)

            await self.sc.publish_async(self.channel, data, ack_handler=handler)  # type: ignore[attr-defined]
        await self.sc.wait_pub_acks()  # type: ignore[attr-defined]
        return len(self.nacked) - before


async def stored_payloads(url: str, channel: str) -> list[bytes]:
    """Every message of the channel, read by a new subscriber up to a sentinel."""
    sc = await stan_connect("test-cluster", f"reader-{uuid.uuid4().hex[:8]}", url=url)
    try:
        await sc.publish(channel, b"sentinel")
        inbox = Inbox()
        await sc.subscribe(channel, cb=inbox, deliver_all_available=True, max_inflight=1024)
        out: list[bytes] = []
        while True:
            m = await inbox.next(10)
            if m.data == b"sentinel":
                return out
            out.append(m.data)
    finally:
        await sc.close()


def check(pub: Publisher, stored: list[bytes]) -> None:
    assert len(stored) == len(set(stored)), "a message is stored twice"
    assert all(len(d) == pub.size for d in stored)
    assert pub.acked <= set(stored), f"{len(pub.acked - set(stored))} acked messages lost"
    assert not set(pub.nacked) & set(stored), "a refused message was stored"
    assert len(pub.acked) + len(pub.nacked) == pub.n, "a publish got no answer"
    assert all("timeout" not in e.lower() for e in pub.nacked.values()), pub.nacked


async def test_file_store_full_disk_then_space_returns(tmp_path: Path) -> None:
    """Publish 4 KiB messages until the tmpfs is full, grow it, publish 300 more, restart."""
    with small_tmpfs(tmp_path / "fs", "1m") as fs:
        args = ["--store", "file", "--dir", str(fs / "data")]
        srv = start_tidings(extra_args=args)
        try:
            await wait_streaming(srv.url)
            sc = await stan_connect("test-cluster", "filler", url=srv.url, ack_timeout=10,
                                    max_pub_acks_inflight=64)
            pub = Publisher(sc, "full", KIB4)
            waves = 0
            while await pub.wave(32) == 0:
                waves += 1
                assert waves < 100, "the tmpfs never filled up"
            # keep publishing on the full disk, also messages big enough to be written
            # while they are stored (not at the sync), to two channels at once: all refused
            big = Publisher(sc, "full-big", 256 * 1024)
            for _ in range(3):  # (a refused big batch frees its space: small ones may fit)
                assert (await asyncio.gather(pub.wave(32), big.wave(8)))[1] == 8
            full_acked = len(pub.acked)
            subprocess.run(["mount", "-o", "remount,size=8m", str(fs)], check=True)
            await pub.wave(300)
            assert await big.wave(4) == 0
            after = [d for d in pub.acked if int(d.split(b"-")[1]) >= pub.n - 300]
            assert len(after) == 300, "publishes still refused after space returned"
            assert pub.nacked, "the disk never filled up"
            check(pub, await stored_payloads(srv.url, "full"))
            await sc.close()
        finally:
            srv.stop()
        srv = start_tidings(port=srv.port, extra_args=args)  # a clean restart
        try:
            await wait_streaming(srv.url)
            stored = await stored_payloads(srv.url, "full")
            check(pub, stored)
            check(big, await stored_payloads(srv.url, "full-big"))
            print(f"tmpfs: {full_acked} acked before the disk filled, {len(pub.nacked)} "
                  f"refused, 300 acked after it grew; {len(stored)} stored after restart")
        finally:
            srv.stop()


async def test_a_full_disk_nacks_whole_batches_and_nothing_refused_is_stored(
    stan: StanFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same without a tmpfs: the server runs in this process on a disk that fills up."""
    disk = Disk(tmp_path, monkeypatch)
    env = await stan(store="file", dir=str(tmp_path / "data"))
    sc = await env.connect("pub", ack_timeout=10, max_pub_acks_inflight=64)
    small = Publisher(sc, "small", KIB4)
    big = Publisher(sc, "big", 300 * 1024)  # a few fill the write buffer while stored
    assert await asyncio.gather(small.wave(20), big.wave(2)) == [0, 0]
    disk.room = 200_000
    refused = await asyncio.gather(small.wave(64), big.wave(8))
    assert refused[0] > 0 and refused[1] > 0
    disk.room = None
    assert await asyncio.gather(small.wave(64), big.wave(4)) == [0, 0]
    check(small, await stored_payloads(env.url, "small"))
    check(big, await stored_payloads(env.url, "big"))
    await env.restart()
    check(small, await stored_payloads(env.url, "small"))
    check(big, await stored_payloads(env.url, "big"))


async def test_a_write_failing_after_a_group_commit_does_not_refuse_that_commit(
    stan: StanFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is committed, then a publish fails (and rolls back) before the worker's
    report of the commit reaches the event loop (a loaded machine): the committed batch is
    durable and must be acknowledged, not refused."""
    disk = Disk(tmp_path, monkeypatch)
    env = await stan(store="file", dir=str(tmp_path / "data"))
    small = Publisher(await env.connect("small", ack_timeout=10), "small", KIB4)
    big = Publisher(await env.connect("big", ack_timeout=10), "big", 300 * 1024)
    assert await asyncio.gather(small.wave(1), big.wave(1)) == [0, 0]
    store = env.server.store
    committed, report = threading.Event(), threading.Event()
    real_sync = store.sync

    def slow_to_report() -> object:
        try:
            return real_sync()
        finally:
            committed.set()
            report.wait(30)

    monkeypatch.setattr(store, "sync", slow_to_report)
    wave = asyncio.ensure_future(small.wave(1))
    assert await asyncio.to_thread(committed.wait, 30)
    disk.room = 0
    assert await big.wave(4) == 4  # written while stored (1.2 MB): refused, rolled back
    disk.room = None
    report.set()
    await wave
    check(small, await stored_payloads(env.url, "small"))
    assert not small.nacked
    check(big, await stored_payloads(env.url, "big"))
    await env.restart()
    check(small, await stored_payloads(env.url, "small"))
    check(big, await stored_payloads(env.url, "big"))


async def test_a_publish_stored_between_two_rollbacks_is_refused(
    stan: StanFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a group commit waits in fsync, a channel cannot be created on the full disk (a
    rollback in the event loop); a publish is stored; the commit then finds it was undercut
    and rolls back again before the server has looked at the store: the publish is gone and
    must be refused, not acknowledged by the next commit."""
    disk = Disk(tmp_path, monkeypatch)
    env = await stan(store="file", dir=str(tmp_path / "data"))
    pub = Publisher(await env.connect("pub", ack_timeout=10), "a", 100)
    other = Publisher(await env.connect("other", ack_timeout=10), "b", 100)
    subscriber = await env.connect("sub")
    assert await asyncio.gather(pub.wave(1), other.wave(1)) == [0, 0]
    store = env.server.store
    real_store, real_sync = store.store_msgs, store.sync
    failed = threading.Event()

    def sync() -> object:
        try:
            return real_sync()
        finally:
            failed.set()

    def store_then_commit_fails(*args: object, **kw: object) -> object:
        seqs = real_store(*args, **kw)
        assert disk.fsync_gate is not None
        disk.fsync_gate.set()  # the held commit goes on, finds the rollback, rolls back
        assert failed.wait(30)
        return seqs

    monkeypatch.setattr(store, "sync", sync)
    disk.fsync_gate = threading.Event()
    first = asyncio.ensure_future(pub.wave(1))
    assert await asyncio.to_thread(disk.fsync_waiting.wait, 30)
    disk.room = 0
    with pytest.raises(StanError, match="No space left on device"):
        await subscriber.subscribe("new", cb=Inbox())
    disk.room = None
    monkeypatch.setattr(store, "store_msgs", store_then_commit_fails)
    await asyncio.gather(first, other.wave(1))
    monkeypatch.setattr(store, "store_msgs", real_store)
    check(pub, await stored_payloads(env.url, "a"))
    check(other, await stored_payloads(env.url, "b"))
    assert len(pub.nacked) == len(other.nacked) == 1
    await env.restart()
    check(pub, await stored_payloads(env.url, "a"))
    check(other, await stored_payloads(env.url, "b"))


async def test_sqlite_store_refusing_writes_nacks_and_recovers(tmp_path: Path) -> None:
    db = tmp_path / "streaming.db"
    args = ["--store", "sql", "--dir", str(tmp_path)]
    srv = start_tidings(extra_args=args)
    try:
        await wait_streaming(srv.url)
        sc = await stan_connect("test-cluster", "pub", url=srv.url, ack_timeout=10)
        pub = Publisher(sc, "refused", 100)
        assert await pub.wave(50) == 0
        other = sqlite3.connect(db)
        other.execute("CREATE TRIGGER refuse BEFORE INSERT ON tidings_messages "
                      "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
        other.commit()
        assert await pub.wave(50) == 50
        assert all("database or disk is full" in e for e in pub.nacked.values())
        other.execute("DROP TRIGGER refuse")
        other.commit()
        other.close()
        assert await pub.wave(50) == 0
        await sc.close()
    finally:
        srv.stop()
    srv = start_tidings(port=srv.port, extra_args=args)
    try:
        await wait_streaming(srv.url)
        check(pub, await stored_payloads(srv.url, "refused"))
    finally:
        srv.stop()


async def test_a_second_server_on_a_sqlite_store_is_refused(tmp_path: Path) -> None:
    args = ["--store", "sql", "--dir", str(tmp_path)]
    srv = start_tidings(extra_args=args)
    try:
        await wait_streaming(srv.url)
        second = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tidings", "server", "-a", "127.0.0.1", "-p",
            "-1", *args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(second.communicate(), 30)
        assert second.returncode != 0
        assert f"is in use by another server (pid {srv.pid})" in err.decode()
        assert "Traceback" not in err.decode()
        # the first server is untouched: its publishes keep succeeding
        sc = await stan_connect("test-cluster", "pub", url=srv.url)
        pub = Publisher(sc, "one", 10)
        assert await pub.wave(20) == 0
        await sc.close()
    finally:
        srv.stop()


def test_recovery_stops_on_valid_records_after_a_torn_one_unless_told_to_truncate(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with FileStore(data) as store:
        store.store_msgs("foo", [("", b"m%d" % i) for i in range(1, 6)])
        store.sync()
    (seg,) = (data / "channels" / "foo").glob("msgs.*.dat")
    raw = seg.read_bytes()
    last = raw.rindex(b"\x05\x00\x00\x00\x00\x00\x00\x00") - 8  # where record 5 starts
    seg.write_bytes(raw[:last] + raw[last : last + 12] + raw[last:])  # 5 torn, then whole
    cmd = [sys.executable, "-m", "tidings", "server", "-a", "127.0.0.1", "-p",
           "-1", "--store", "file", "--dir", str(data)]
    refused = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0
    assert f"{seg}: corrupt record at offset {last} followed by valid records" in refused.stderr
    assert "Traceback" not in refused.stderr
    # The store is recovered (and truncated) when the streaming server starts, after the
    # client port answers: start_tidings returns once streaming is ready.
    srv = start_tidings(extra_args=[*cmd[8:], "--file_truncate_bad_eof", "true"])
    srv.stop()
    with FileStore(data) as store:
        assert store.first_last("foo") == (1, 4)
