"""JetStream's file store under kill -9, on tidings and on the reference nats-server.

Publishers that wait for each PubAck and a durable pull consumer that acknowledges each
message (explicit acks, waiting for the server's answer) run while the server is killed
with SIGKILL, a few rounds in a row, each restart on the same store directory.

What must hold, from the reference's file store (filestore.go):

- **Messages**: a PubAck is sent once the message is written to the OS (fsynced first with
  `sync_interval: always`). The OS outlives the process, so every acknowledged message is in
  the stream after the restart, at the sequence its PubAck named, with its payload and
  headers; the stream's last sequence is at least the highest acknowledged one, and new
  publishes go on after it.
- **Consumers**: the reference's consumer store (consumerFileStore) keeps the consumer's
  state in memory, and each delivery or ack kicks a flusher that writes the whole state to a
  file (written aside and renamed, so never torn; fsynced with `sync_interval: always`) at
  most every 100 ms; stopping writes it once more. So kill -9 may lose the acks of the last
  flush interval: those messages are delivered again (at least once), which is allowed. What
  may never happen is the state going back behind a state it had saved: after the restart,
  the consumer's ack floor is at least the ack floor of its last saved state, and at least
  the floor it had after the previous restart. tidings saves a durable's state the same way,
  every second (api.SAVE_EVERY ticks) instead of every 100 ms: the test takes the floor
  CONSUMER.INFO reported, waits until tidings' state file holds it (that is "saved"), and
  checks the floor after kill -9 is not below the last floor on disk before the kill. The
  reference's state file is binary: there only the floor after each restart is checked not
  to go back (nats-server 2.15 was seen to come back further behind than 100 ms: a floor
  of 0 when 121 messages had been acknowledged for a second; at least once still held).
- A durable consumer exists once CONSUMER.CREATE has answered (the reference writes its
  configuration before answering), kill -9 or not.
- After the last restart the consumer, left to run, delivers every message the stream holds:
  every stream sequence is acknowledged at some point (nothing skipped).

And on a full disk (a tmpfs too small, grown again), tidings only (the reference refuses
long before, at its max_file_store, 75% of the disk's free space at start; and on a write
error it stops answering and keeps the stream broken until restarted): each publish gets a
PubAck or an error PubAck (JSStreamStoreFailedF, 503 / 10077, the OS's error), never
silence; nothing refused is stored; a restart on the full disk loses nothing; publishing
works again once there is room. The same in this process on a disk that fills up
(tests/faultydisk.py), with a purge, a message delete and a work queue's ack: each gets an
answer, nothing fails inside the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, StorageType
from nats.js.errors import APIError

from tests.faultydisk import Disk, small_tmpfs
from tests.harness import Server, start_configured, start_inprocess

pytestmark = pytest.mark.timeout(300)

KINDS = ["tidings", "reference"]
STREAM, SUBJECT, DURABLE = "CRASH", "crash.>", "C"
ACK_WAIT = 2.0  # seconds: what a restart left pending comes again soon
PUBLISHERS = 3
PER_ROUND = 120  # acknowledged publishes (and consumer acks) before the floor is taken
MORE = 60  # and after it was saved, before the kill


@dataclass
class Seen:
    """What the clients were told, over all rounds."""

    published: dict[int, tuple[bytes, str]] = field(default_factory=dict)  # seq -> data, hdr
    consumed: set[int] = field(default_factory=set)  # stream sequences acked (and answered)
    restored_floors: list[int] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def until(self, check: Callable[[], bool], timeout: float = 60.0) -> None:
        """Until `check()` holds (tested after each publish or ack)."""
        async def wait() -> None:
            while not check():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), timeout)


def conf(store: Path, sync: str | None) -> str:
    extra = f"\n  sync_interval: {sync}" if sync else ""
    return f'jetstream {{\n  store_dir: "{store}"{extra}\n}}\n'


@contextlib.contextmanager
def server(kind: str, store: Path, sync: str | None = None) -> Iterator[Server]:
    srv = start_configured(kind, conf(store, sync), streaming=False)
    try:
        yield srv
    finally:
        srv.stop()


async def connect(srv: Server) -> Client:
    return await nats.connect(srv.url, allow_reconnect=False, max_reconnect_attempts=0)


def state_file(store: Path) -> Path:
    """tidings' saved state of the durable (stream.py's save_consumers)."""
    return store / "jetstream" / "$G" / "streams" / STREAM / "obs" / DURABLE / "state.json"


def saved_floor(store: Path) -> int:
    """The ack floor (stream sequence) in tidings' state file of the durable, 0 if none."""
    try:
        return int(json.loads(state_file(store).read_text())["ack_floor"][1])
    except (OSError, ValueError, KeyError):
        return 0


async def poll(check: Callable[[], bool], timeout: float = 20.0) -> None:
    """Until `check()` holds: a file the server writes on its own, with no event to wait for."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def create(js: JetStreamContext) -> None:
    await js.add_stream(name=STREAM, subjects=[SUBJECT], storage=StorageType.FILE)
    await js.add_consumer(STREAM, ConsumerConfig(
        durable_name=DURABLE, ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT,
        max_ack_pending=-1))


# -- the clients --------------------------------------------------------------------------
async def publisher(js: JetStreamContext, seen: Seen, tag: str) -> None:
    """Publish until the connection goes; each PubAck recorded."""
    i = 0
    while True:
        data = f"{tag}-{i}".encode()
        header = f"h-{tag}-{i}"
        try:
            ack = await js.publish(f"crash.{i % 7}", data, timeout=10,
                                   headers={"Idx": header})
        except Exception:  # the server was killed
            return
        assert ack.seq not in seen.published, "two PubAcks name one sequence"
        seen.published[ack.seq] = (data, header)
        seen.changed.set()
        i += 1


async def consumer(js: JetStreamContext, seen: Seen, stop: asyncio.Event | None = None) -> None:
    """Fetch and acknowledge (waiting for the server's answer) until the connection goes."""
    sub = await js.pull_subscribe_bind(DURABLE, STREAM)
    while stop is None or not stop.is_set():
        try:
            msgs = await sub.fetch(25, timeout=1.0)
        except NatsTimeout:
            continue
        except Exception:
            return
        for msg in msgs:
            try:
                await msg.ack_sync(timeout=10)
            except Exception:
                return
            seen.consumed.add(msg.metadata.sequence.stream)
            seen.changed.set()


def run_clients(js: JetStreamContext, seen: Seen, round_no: int) -> list[asyncio.Task[None]]:
    tasks = [asyncio.create_task(publisher(js, seen, f"r{round_no}p{p}"))
             for p in range(PUBLISHERS)]
    return [*tasks, asyncio.create_task(consumer(js, seen))]


# -- one round ----------------------------------------------------------------------------
async def round_until_kill(srv: Server, store: Path, seen: Seen, round_no: int) -> int:
    """Clients run; the consumer's floor is taken (and, on tidings, waited for on disk);
    more runs; kill -9. The floor the state file had at the kill (0 on the reference)."""
    nc = await connect(srv)
    js = nc.jetstream()
    tasks = run_clients(js, seen, round_no)
    pubs, acks = len(seen.published), len(seen.consumed)
    await seen.until(lambda: len(seen.published) >= pubs + PER_ROUND
                     and len(seen.consumed) >= acks + PER_ROUND)
    reported = (await js.consumer_info(STREAM, DURABLE)).ack_floor.stream_seq
    if srv.kind == "tidings":
        await poll(lambda: saved_floor(store) >= reported)
    pubs, acks = len(seen.published), len(seen.consumed)
    await seen.until(lambda: len(seen.published) >= pubs + MORE
                     and len(seen.consumed) >= acks + MORE)
    on_disk = saved_floor(store) if srv.kind == "tidings" else 0
    assert on_disk >= (reported if srv.kind == "tidings" else 0)
    srv.kill()
    await asyncio.gather(*tasks)
    await nc.close()
    return on_disk


async def check_after_restart(srv: Server, seen: Seen, floor_at_kill: int) -> None:
    nc = await connect(srv)
    js = nc.jetstream()
    try:
        state = (await js.stream_info(STREAM)).state
        assert state.last_seq >= max(seen.published)
        for seq, (data, header) in sorted(seen.published.items()):
            msg = await js.get_msg(STREAM, seq)
            assert (msg.seq, msg.data) == (seq, data), seq
            assert (msg.headers or {}).get("Idx") == header, seq
        info = await js.consumer_info(STREAM, DURABLE)
        floor = info.ack_floor.stream_seq
        assert floor >= floor_at_kill, "the consumer's ack floor went back behind its saved state"
        if seen.restored_floors:
            assert floor >= seen.restored_floors[-1], "the ack floor went back over a restart"
        assert floor <= info.delivered.stream_seq <= state.last_seq
        seen.restored_floors.append(floor)
    finally:
        await nc.close()


async def drain(srv: Server, seen: Seen) -> None:
    """The consumer, alone, until it has nothing left: every message was acknowledged."""
    nc = await connect(srv)
    js = nc.jetstream()
    stop = asyncio.Event()
    task = asyncio.create_task(consumer(js, seen, stop))
    try:
        last = (await js.stream_info(STREAM)).state.last_seq
        await seen.until(lambda: set(range(1, last + 1)) <= seen.consumed)
        # and what a kill left behind (acked before it, the ack not saved) comes again
        while True:
            seen.changed.clear()
            info = await js.consumer_info(STREAM, DURABLE)
            if not info.num_ack_pending and not info.num_pending:
                break
            await asyncio.wait_for(seen.changed.wait(), 10 * ACK_WAIT)  # its next ack
        stop.set()
        await task
        assert (info.num_pending, info.ack_floor.stream_seq) == (0, last)
        ack = await js.publish("crash.after", b"after")
        assert ack.seq == last + 1
    finally:
        stop.set()
        await nc.close()


@pytest.mark.parametrize("sync,rounds", [(None, 3), ("always", 2)],
                         ids=["sync_interval_default", "sync_interval_always"])
@pytest.mark.parametrize("kind", KINDS)
async def test_kill_9_loses_no_acked_message_and_no_saved_consumer_state(
        kind: str, sync: str | None, rounds: int, tmp_path: Path) -> None:
    store = tmp_path / "store"
    seen = Seen()
    with server(kind, store, sync) as srv:
        nc = await connect(srv)
        await create(nc.jetstream())
        await nc.close()
        for round_no in range(rounds):
            floor_at_kill = await round_until_kill(srv, store, seen, round_no)
            srv.start()
            await check_after_restart(srv, seen, floor_at_kill)
        await drain(srv, seen)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_durable_consumer_survives_kill_9_right_after_its_creation(
        kind: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    with server(kind, store) as srv:
        nc = await connect(srv)
        js = nc.jetstream()
        await create(js)
        ack = await js.publish("crash.1", b"one")
        srv.kill()
        await nc.close()
        srv.start()
        nc = await connect(srv)
        js = nc.jetstream()
        try:
            info = await js.consumer_info(STREAM, DURABLE)
            assert (info.config.ack_policy, info.config.ack_wait) == (AckPolicy.EXPLICIT,
                                                                      ACK_WAIT)
            sub = await js.pull_subscribe_bind(DURABLE, STREAM)
            (msg,) = await sub.fetch(1, timeout=5)
            assert (msg.metadata.sequence.stream, msg.data) == (ack.seq, b"one")
        finally:
            await nc.close()


# -- a full disk (a tmpfs) ---------------------------------------------------------------
@dataclass
class Outcomes:
    """Each publish's answer: a PubAck's sequence, or an error PubAck's error."""

    acked: dict[int, bytes] = field(default_factory=dict)
    refused: dict[bytes, APIError] = field(default_factory=dict)
    n: int = 0

    async def wave(self, js: JetStreamContext, count: int, size: int) -> int:
        """Publish `count` messages of `size` bytes; how many were refused."""
        before = len(self.refused)
        for _ in range(count):
            data = f"m{self.n}-".encode().ljust(size, b".")
            self.n += 1
            try:
                ack = await js.publish("crash.full", data, timeout=10)
            except APIError as exc:
                self.refused[data] = exc
                continue
            self.acked[ack.seq] = data
        return len(self.refused) - before

    async def check(self, js: JetStreamContext) -> None:
        """Every acked message stored, nothing refused stored, every refusal the store's."""
        stored = {}
        state = (await js.stream_info(STREAM)).state
        for seq in range(state.first_seq, state.last_seq + 1):
            stored[seq] = (await js.get_msg(STREAM, seq)).data
        assert stored == self.acked
        for exc in self.refused.values():
            assert (exc.code, exc.err_code) == (503, 10077), exc
            assert "No space left on device" in (exc.description or ""), exc


async def test_a_full_disk_refuses_publishes_and_recovers(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "fs", "1m") as fs, server("tidings", fs / "store") as srv:
        nc = await connect(srv)
        js = nc.jetstream()
        await create(js)
        out = Outcomes()
        sub = await js.pull_subscribe_bind(DURABLE, STREAM)
        waves = 0
        while await out.wave(js, 16, 4096) == 0:
            waves += 1
            assert waves < 100, "the tmpfs never filled up"
            for msg in await sub.fetch(8, timeout=5):  # the consumer's state changes too
                await msg.ack_sync()
        assert await out.wave(js, 8, 4096) == 8
        await out.check(js)
        srv.kill()  # and a restart on the full disk
        await nc.close()
        srv.start()
        nc = await connect(srv)
        js = nc.jetstream()
        await out.check(js)
        assert await out.wave(js, 4, 4096) == 4
        subprocess.run(["mount", "-o", "remount,size=8m", str(fs)], check=True)
        assert await out.wave(js, 64, 4096) == 0
        await out.check(js)
        sub = await js.pull_subscribe_bind(DURABLE, STREAM)
        assert len(await sub.fetch(8, timeout=5)) == 8
        await nc.close()
        srv.stop()
        srv.start()
        nc = await connect(srv)
        await out.check(nc.jetstream())
        await nc.close()
        assert "Traceback" not in srv.log(), srv.log()[-3000:]


async def test_on_a_full_disk_every_request_is_answered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The server in this process, on a disk that fills up (tests/faultydisk.py): a
    publish, a message delete, a purge, a work queue's ack each get an answer (the
    reference's error for what failed), nothing fails inside the server, and all of it
    works again once there is room."""
    disk = Disk(tmp_path, monkeypatch)
    srv = await start_inprocess(config=conf(tmp_path / "store", None), streaming=False)
    nc = await nats.connect(srv.url)
    try:
        js = nc.jetstream()
        await create(js)
        await js.add_stream(name="WQ", subjects=["wq"], retention="workqueue",
                            storage=StorageType.FILE)
        await js.add_consumer("WQ", ConsumerConfig(durable_name="W",
                                                   ack_policy=AckPolicy.EXPLICIT))
        for i in range(4):
            await js.publish("crash.1", b"m%d" % i)
            await js.publish("wq", b"job%d" % i)
        work = await js.pull_subscribe_bind("W", "WQ")
        disk.room = 0
        with caplog.at_level(logging.WARNING):
            await refused_while_full(js, work)
        assert not [r for r in caplog.records if r.exc_info], caplog.text
        disk.room = None
        assert (await js.publish("crash.1", b"fits")).seq == 5
        assert await js.delete_msg(STREAM, 1)
        assert await js.purge_stream(STREAM)
        assert (await js.stream_info(STREAM)).state.messages == 0
        (job,) = await work.fetch(1, timeout=5)
        await job.ack_sync()
    finally:
        await nc.close()
        await srv.stop()


async def refused_while_full(js: JetStreamContext, work: JetStreamContext.PullSubscription
                             ) -> None:
    with pytest.raises(APIError) as refused:
        await js.publish("crash.1", b"no room")
    assert (refused.value.code, refused.value.err_code) == (503, 10077)
    assert "No space left on device" in (refused.value.description or "")
    with pytest.raises(APIError) as refused:
        await js.delete_msg(STREAM, 2)
    assert (refused.value.code, refused.value.err_code) == (500, 10057)
    with pytest.raises(APIError) as refused:
        await js.purge_stream(STREAM)
    assert (refused.value.code, refused.value.err_code) == (500, 10051)
    (job,) = await work.fetch(1, timeout=5)
    await job.ack_sync()  # answered; the job stays in the stream while the disk is full
    state = (await js.stream_info(STREAM)).state
    assert (state.messages, state.last_seq) == (4, 4)
