#!/usr/bin/env python3
"""Hardening benchmark: the workloads of issue 9 on tidings and the reference nats-server.

Each workload runs on a freshly started server of each kind (tidings first, then the
reference), over raw sockets on asyncio, and gives up after a bound instead of hanging: a
figure shown as "> X" is where the server had not answered yet when the workload gave up.
The table shows per metric the two figures and the ratio tidings / reference.

  sub-churn        the subject cache filled (70,000 distinct subjects published, a `fill.*`
                   subscriber present), then wildcard SUB+UNSUB pairs/s (100 pairs per
                   PING/PONG) and the longest PING round trip of a probe client meanwhile
  close-wildcards  a connection holding 5,000 wildcard subscriptions closes while the cache is
                   full: the longest probe round trip until the server answers again
  unsub-reverse    50,000 subscriptions on one subject unsubscribed in reverse order: time until
                   the PONG, and the longest probe round trip meanwhile
  long-ping        `PING ` and 64 MiB of `a` without LF: time until the server answers a probe
                   again (and whether it closed the sender), longest probe round trip, peak RSS
                   growth of the server
  slow-consumer    1 KiB messages published as fast as possible for 5 s to a subject with a
                   subscriber that stopped reading (4 KiB receive buffer) and a healthy one: the
                   healthy subscriber's longest gap, the publisher's longest blocked write,
                   request/reply p99 and max, probe max, when the stuck consumer was closed
                   (watched for 12 s from the start: both servers' write deadline is 10 s)
  slow-consumer-16 the same with the flood paced at 16 MiB/s, the rate the reference lets the
                   unpaced publisher reach: both servers under the same load
  streaming-stuck  a core `>` subscriber that stopped reading while a streaming publisher
                   publishes 1 KiB messages for 5 s: the longest gap between PubAcks, when the
                   stuck subscriber was closed. tidings runs its embedded streaming server; the
                   reference column is the reference nats-server with `tidings streaming` as a
                   separate process on it (no reference streaming server is installed)
  deep-subject     a 1,500-token `*.*...` subscriber and an exact one, a publish to the
                   1,500-token subject (max_control_line 64 KiB on both): who got it

    python benchmarks/hardening.py [--quick] [--only sub-churn,long-ping] [--tidings-only]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable from a checkout without installing the package
    sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import tidings.streaming.client as stan  # noqa: E402
from benchmarks.compare import fmt  # noqa: E402
from tests.harness import Server, start_reference, start_tidings  # noqa: E402
from tidings.bench.procstat import memory_kib  # noqa: E402
from tidings.bench.report import write_json  # noqa: E402
from tidings.bench.wire import Conn, Endpoint, ProtocolError, pub_frame, sub_frame  # noqa: E402
from tidings.client import errors as nats_errors  # noqa: E402

TIDINGS, REFERENCE = "tidings", "reference"
PING, PONG = b"PING\r\n", b"PONG\r\n"
PROBE_INTERVAL = 0.005  # seconds between two round trips of a probe
SETTLE = 0.2  # seconds for the server to notice a close before a probe is asked to get through
STUCK_RCVBUF = 4096  # receive buffer of a consumer that stops reading
# How long after the flood started a stuck consumer is watched for its close: a little longer
# than the write deadline of both servers (10 s by default).
STUCK_WATCH = 12.0
CHURN_CHUNK = 100  # SUB+UNSUB pairs per PING/PONG
DEEP_TOKENS = 1_500
ERRORS = (OSError, EOFError, ProtocolError, stan.StanError, nats_errors.Error)


def now() -> float:
    return time.perf_counter()


class GaveUp(Exception):
    """A step the measurement depends on did not finish within the bound."""


@dataclass(frozen=True)
class Size:
    """How big the workloads are, and how long a workload waits for a server at most."""

    subjects: int = 70_000  # distinct subjects that fill the subject cache
    pairs: int = 1_000  # wildcard SUB+UNSUB pairs of sub-churn
    wildcards: int = 5_000  # wildcard subscriptions of the closing connection
    same_subject: int = 50_000  # subscriptions of unsub-reverse
    long_ping_mib: int = 64
    flood: float = 5.0  # seconds of publishing in slow-consumer and streaming-stuck
    limit: float = 20.0  # seconds a workload waits for an answer before it gives up

    @property
    def hard_limit(self) -> float:
        """The bound of a whole workload run, a safety net over the bounds of its steps."""
        return 3 * self.limit + self.flood + 30


FULL = Size()
QUICK = Size(pairs=200, wildcards=2_000, same_subject=20_000, long_ping_mib=16, flood=2.0,
             limit=10.0)


@dataclass(frozen=True)
class Figure:
    """One measured value of one server, in the unit of its metric."""

    value: float | None = None
    bound: str = ""  # ">" or "<": the workload gave up and the true value lies beyond
    text: str = ""  # yes/no, how a connection ended, or why there is no value

    def show(self) -> str:
        if self.value is None:
            return self.text or "-"
        number = f"{self.bound} {fmt(self.value)}".strip()
        return f"{number} ({self.text})" if self.text else number


def seconds_as_ms(seconds: float, bound: str = "", text: str = "") -> Figure:
    return Figure(seconds * 1000, bound, text)


async def within(aw: Awaitable[Any], deadline: float) -> bool:
    """Await `aw` until `deadline` (a perf_counter time): True if it finished in time."""
    try:
        await asyncio.wait_for(aw, max(0.0, deadline - now()))
        return True
    except asyncio.TimeoutError:
        return False


# -- raw connections ---------------------------------------------------------------------------

class Raw:
    """A NATS connection on plain asyncio streams: the handshake, frames out, operations in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.msgs = 0  # MSG frames passed over while waiting for a PONG

    @classmethod
    async def open(cls, port: int, name: str, rcvbuf: int = 0) -> Raw:
        sock = socket.socket()
        if rcvbuf:  # before connect, so that the window the server sees is small from the start
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        except OSError:
            sock.close()
            raise
        reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 20)
        conn = cls(reader, writer)
        line, _ = await conn.op()
        if not line.startswith(b"INFO"):
            raise ProtocolError(f"expected INFO, got {line[:80]!r}")
        conn.send(Endpoint("127.0.0.1", port).connect_options(name))
        await conn.flush()
        return conn

    @property
    def local_port(self) -> int:
        return int(self.writer.get_extra_info("sockname")[1])

    def send(self, data: bytes) -> None:
        if self.writer.is_closing():
            raise ConnectionResetError("the connection is closed")
        self.writer.write(data)

    async def drain(self) -> None:
        await self.writer.drain()

    async def op(self) -> tuple[bytes, bytes]:
        """The next operation line (without CRLF) and the payload of a MSG; answers PINGs."""
        while True:
            try:
                line = await self.reader.readuntil(b"\r\n")
            except asyncio.IncompleteReadError:
                raise ConnectionResetError("the server closed the connection") from None
            line = line[:-2]
            if line == b"PING":
                self.send(PONG)
            elif line.startswith(b"-ERR"):
                raise ProtocolError(line.decode(errors="replace"))
            elif line.startswith((b"MSG ", b"HMSG ")):
                size = int(line.rsplit(b" ", 1)[1])
                try:
                    payload = await self.reader.readexactly(size + 2)
                except asyncio.IncompleteReadError:
                    raise ConnectionResetError("the server closed the connection") from None
                return line, payload[:-2]
            else:
                return line, b""

    async def pong(self) -> None:
        while True:
            line, _ = await self.op()
            if line == b"PONG":
                return
            if line.startswith((b"MSG ", b"HMSG ")):
                self.msgs += 1

    async def flush(self) -> None:
        """PING/PONG barrier: everything sent before has been processed by the server."""
        self.send(PING)
        await self.pong()

    async def next_msg(self) -> bytes:
        """The control line of the next MSG."""
        while True:
            line, _ = await self.op()
            if line.startswith((b"MSG ", b"HMSG ")):
                return line

    def stop_reading(self) -> None:
        """From now on the kernel buffers fill up and the server sees a consumer that is stuck."""
        self.writer.transport.pause_reading()

    def close(self) -> None:
        self.writer.close()


class RoundTrips:
    """A round trip repeated every PROBE_INTERVAL in the background, its times in seconds."""

    def __init__(self, once: Callable[[], Awaitable[None]]) -> None:
        self.once = once
        self.rtts: list[float] = []
        self.pending_since: float | None = None  # when the unanswered round trip started
        self.stopped_at: float | None = None
        self.error = ""
        self.latest_answered = 0.0  # start of the latest round trip that got its answer
        self.changed = asyncio.Condition()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            while True:
                self.pending_since = sent = now()
                await self.once()
                self.rtts.append(now() - sent)
                self.pending_since = None
                async with self.changed:
                    self.latest_answered = sent
                    self.changed.notify_all()
                await asyncio.sleep(PROBE_INTERVAL)
        except ERRORS as e:
            self.error = str(e) or type(e).__name__
            async with self.changed:
                self.changed.notify_all()

    async def answered_after(self, t: float, deadline: float) -> bool:
        """Wait until a round trip that started at `t` or later was answered."""
        async with self.changed:
            waiting = self.changed.wait_for(lambda: self.latest_answered >= t or self.error != "")
            return await within(waiting, deadline) and self.latest_answered >= t

    async def finish(self, deadline: float) -> None:
        """Stop once a round trip started now got its answer (or at `deadline`)."""
        await self.answered_after(now(), deadline)
        await self.stop()

    async def stop(self) -> None:
        if self.stopped_at is None:
            self.stopped_at = now()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    def worst(self) -> Figure:
        """The longest round trip in ms; one still unanswered when stopped counts as '>'."""
        end = self.stopped_at or now()
        pending = end - self.pending_since if self.pending_since is not None else 0.0
        done = max(self.rtts, default=0.0)
        note = "probe lost: " + self.error if self.error else ""
        if pending > done:
            return seconds_as_ms(pending, ">", note)
        return seconds_as_ms(done, "", note) if self.rtts else Figure(text=note or "no answer")

    def p99(self) -> Figure:
        if not self.rtts:
            return Figure(text="no answer")
        ordered = sorted(self.rtts)
        return seconds_as_ms(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))])


class Sink:
    """Reads a connection to its end, throwing the bytes away, noting when data arrives."""

    def __init__(self, conn: Raw) -> None:
        self.received = 0
        self.first = self.last = 0.0
        self.gap = 0.0  # the longest time between two arrivals
        self.task = asyncio.create_task(self._run(conn.reader))

    async def _run(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(*ERRORS):
            while chunk := await reader.read(1 << 18):
                t = now()
                if self.received:
                    self.gap = max(self.gap, t - self.last)
                else:
                    self.first = t
                self.last = t
                self.received += len(chunk)

    @property
    def closed(self) -> bool:
        return self.task.done()

    def longest_gap(self, start: float, end: float) -> float:
        """The longest time without data between `start` and `end`."""
        if not self.received:
            return end - start
        return max(self.gap, self.first - start, end - self.last)

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def server_side_state(server_port: int, client_port: int) -> str | None:
    """The TCP state of the server's end of a loopback connection (None: gone)."""
    local, remote = f"0100007F:{server_port:04X}", f"0100007F:{client_port:04X}"
    with open("/proc/net/tcp") as f:
        for line in f:
            fields = line.split()  # sl, local address, remote address, state, ...
            if fields[1:3] == [local, remote]:
                return fields[3]
    return None


class CloseWatch:
    """When the server closes a connection that we do not read (so no EOF can reach us)."""

    ESTABLISHED = "01"

    def __init__(self, server_port: int, conn: Raw, start: float) -> None:
        self.closed_after: float | None = None
        self.task = asyncio.create_task(self._run(server_port, conn.local_port, start))

    async def _run(self, server_port: int, client_port: int, start: float) -> None:
        while server_side_state(server_port, client_port) == self.ESTABLISHED:
            await asyncio.sleep(0.02)
        self.closed_after = now() - start

    async def wait(self, deadline: float) -> None:
        """Until the close was seen or `deadline`."""
        await within(asyncio.shield(self.task), deadline)

    def figure(self) -> Figure:
        if self.closed_after is None:
            return Figure(text=f"not within {STUCK_WATCH:g} s")
        return Figure(self.closed_after)

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@dataclass
class Session:
    """One workload run on one server: its connections and background tasks, ended together."""

    server: Server
    size: Size
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.server.port

    async def open(self, name: str, rcvbuf: int = 0) -> Raw:
        conn = await Raw.open(self.port, f"hardening-{name}", rcvbuf)

        async def close() -> None:
            conn.close()

        self.closers.append(close)
        return conn

    async def subscribe(self, name: str, subject: str, rcvbuf: int = 0) -> Raw:
        conn = await self.open(name, rcvbuf)
        conn.send(sub_frame(subject, "1"))
        await self.barrier(conn, f"SUB {subject[:40]}")
        return conn

    async def barrier(self, conn: Raw, what: str) -> None:
        if not await within(conn.flush(), now() + self.size.limit):
            raise GaveUp(f"{what}: no PONG within {self.size.limit:g} s")

    def sink(self, conn: Raw) -> Sink:
        sink = Sink(conn)
        self.closers.append(sink.stop)
        return sink

    def round_trips(self, once: Callable[[], Awaitable[None]]) -> RoundTrips:
        trips = RoundTrips(once)
        self.closers.append(trips.stop)
        return trips

    async def ping_probe(self) -> RoundTrips:
        conn = await self.open("probe")
        return self.round_trips(conn.flush)

    def close_watch(self, conn: Raw, start: float) -> CloseWatch:
        watch = CloseWatch(self.port, conn, start)
        self.closers.append(watch.stop)
        return watch

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)

        async def stop() -> None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, *ERRORS):
                await task

        self.closers.append(stop)

    async def end(self) -> None:
        for close in reversed(self.closers):
            with contextlib.suppress(*ERRORS):
                await within(close(), now() + 5)
        self.closers.clear()


# -- the workloads -----------------------------------------------------------------------------

Figures = dict[str, Figure]


async def fill_cache(s: Session) -> None:
    """Publish to `size.subjects` distinct subjects with a wildcard subscriber matching them."""
    s.sink(await s.subscribe("fill-sub", "fill.*"))
    pub = await s.open("fill-pub")
    deadline = now() + s.size.limit
    for first in range(0, s.size.subjects, 1000):
        last = min(s.size.subjects, first + 1000)
        pub.send(b"".join(b"PUB fill.%d 0\r\n\r\n" % i for i in range(first, last)))
        if not await within(pub.drain(), deadline):
            raise GaveUp(f"publishing {s.size.subjects:,} subjects took > {s.size.limit:g} s")
    await s.barrier(pub, "filling the subject cache")


async def sub_churn(s: Session) -> Figures:
    await fill_cache(s)
    churner = await s.open("churn")
    probe = await s.ping_probe()
    pairs, start = 0, now()
    deadline = start + s.size.limit
    while pairs < s.size.pairs:
        churner.send(b"".join(b"SUB churn.* c%d\r\nUNSUB c%d\r\n" % (i, i)
                              for i in range(pairs, pairs + CHURN_CHUNK)) + PING)
        if not await within(churner.pong(), deadline):
            break
        pairs += CHURN_CHUNK
    elapsed = now() - start
    await probe.finish(deadline)
    rate = Figure(pairs / elapsed) if pairs else Figure(CHURN_CHUNK / elapsed, "<")
    return {"pairs": rate, "probe": probe.worst()}


async def close_wildcards(s: Session) -> Figures:
    holder = await s.open("wildcards")
    holder.send(b"".join(b"SUB w.%d.* %d\r\n" % (i, i) for i in range(s.size.wildcards)))
    await s.barrier(holder, "subscribing")  # before the cache fills: cheap on both servers
    await fill_cache(s)
    probe = await s.ping_probe()
    start = now()
    holder.close()
    await asyncio.sleep(SETTLE)  # the server sees the EOF and starts removing
    await probe.finish(start + s.size.limit)
    return {"probe": probe.worst()}


async def unsub_reverse(s: Session) -> Figures:
    n = s.size.same_subject
    conn = await s.open("unsub")
    conn.send(b"".join(b"SUB same %d\r\n" % i for i in range(1, n + 1)))
    await s.barrier(conn, f"{n:,} SUBs")
    probe = await s.ping_probe()
    start = now()
    conn.send(b"".join(b"UNSUB %d\r\n" % i for i in range(n, 0, -1)) + PING)
    answered = await within(conn.pong(), start + s.size.limit)
    took = now() - start
    await probe.finish(start + s.size.limit)
    return {"pong": seconds_as_ms(took, "" if answered else ">"), "probe": probe.worst()}


def reset_peak_rss(pid: int) -> None:
    """Make VmHWM start again from the current RSS (Linux >= 4.0; harmless where refused)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


async def long_ping(s: Session) -> Figures:
    pid = s.server.pid
    probe = await s.ping_probe()
    conn = await s.open("long-ping")
    reset_peak_rss(pid)
    before = memory_kib(pid)["VmRSS"]
    start = now()
    deadline = start + s.size.limit
    chunk = b"a" * (1 << 20)
    sent, outcome = 0, ""
    try:
        conn.send(b"PING ")
        while sent < s.size.long_ping_mib and not outcome:
            conn.send(chunk)
            if not await within(conn.drain(), deadline):
                outcome = f"gave up after {sent} MiB"
            sent += 1
    except OSError:
        outcome = f"closed after {sent} MiB"
    answered = await probe.answered_after(now(), deadline)
    took = now() - start
    await probe.stop()
    grown = (memory_kib(pid)["VmHWM"] - before) / 1024
    if not outcome:
        outcome = await still_open(conn, now() + s.size.limit)
    return {"answer": seconds_as_ms(took, "" if answered else ">"), "probe": probe.worst(),
            "rss": Figure(grown), "outcome": Figure(text=outcome)}


async def still_open(conn: Raw, deadline: float) -> str:
    """Whether a connection in the middle of a line still answers once the line ends."""
    try:
        conn.send(b"\r\n" + PING)
        return "kept" if await within(conn.pong(), deadline) else "no PONG"
    except ERRORS as e:
        return f"closed ({e})"


async def respond(conn: Raw) -> None:
    """Answer every request with an empty reply."""
    while True:
        line = await conn.next_msg()
        conn.send(b"PUB %s 0\r\n\r\n" % line.split()[3])


def requester(conn: Raw, subject: bytes) -> Callable[[], Awaitable[None]]:
    async def once() -> None:
        conn.send(b"PUB %s inbox.hardening 0\r\n\r\n" % subject)
        await conn.next_msg()

    return once


@dataclass
class Flood:
    """What a flooding publisher saw."""

    seconds: float = 0.0  # of publishing
    sent: int = 0  # bytes
    stall: float = 0.0  # the longest time one write was blocked
    outcome: str = ""  # empty, or how it ended early


def flood(port: int, subject: str, seconds: float, limit: float, rate: float = 0.0) -> Flood:
    """Publish 1 KiB messages for `seconds` as fast as the socket takes them (or at `rate`
    MiB/s when given), then PING.

    Blocking, for a thread of its own: the event loop that times the probes stays free.
    """
    out = Flood()
    conn = Conn(Endpoint("127.0.0.1", port), "hardening-publisher", timeout=limit)
    batch = pub_frame(subject, b"x" * 1024) * 256
    start = t = now()
    try:
        while t < start + seconds:
            conn.sock.sendall(batch)
            out.stall = max(out.stall, now() - t)
            out.sent += len(batch)
            t = now()
            if rate:
                ahead = out.sent / (rate * (1 << 20)) - (t - start)
                if ahead > 0:
                    time.sleep(ahead)
                    t = now()
    except TimeoutError:
        out.stall, out.outcome = now() - t, "gave up"
    except OSError:
        out.outcome = "publisher closed"
    out.seconds = now() - start
    try:
        if not out.outcome:
            conn.flush()
    except TimeoutError:
        out.outcome = "no PONG"
    except (OSError, ProtocolError):
        out.outcome = "publisher closed"
    finally:
        conn.close()
    return out


async def slow_consumer(s: Session, rate: float = 0.0) -> Figures:
    """A stuck and a healthy subscriber on one subject, flooded (at `rate` MiB/s if given:
    both servers then carry the same load, whereas unpaced each takes what it can)."""
    stuck = await s.subscribe("stuck", "foo", STUCK_RCVBUF)
    stuck.stop_reading()
    healthy = s.sink(await s.subscribe("healthy", "foo"))
    s.spawn(respond(await s.subscribe("responder", "svc")))
    requests = s.round_trips(requester(await s.subscribe("requester", "inbox.hardening"), b"svc"))
    probe = await s.ping_probe()
    start = now()
    watch = s.close_watch(stuck, start)
    pub = await asyncio.to_thread(flood, s.port, "foo", s.size.flood, s.size.limit, rate)
    flood_end = start + pub.seconds
    await requests.finish(now() + s.size.limit)
    await probe.finish(now() + s.size.limit)
    await watch.wait(start + STUCK_WATCH)
    return {
        "gap": seconds_as_ms(healthy.longest_gap(start, flood_end),
                             text="healthy closed" if healthy.closed else ""),
        "stall": seconds_as_ms(pub.stall, ">" if pub.outcome == "gave up" else "", pub.outcome),
        "req_p99": requests.p99(), "req_max": requests.worst(), "probe": probe.worst(),
        "closed": watch.figure(),
        "rate": Figure(pub.sent / (1 << 20) / pub.seconds),
    }


async def stan_connect(url: str, deadline: float) -> stan.StreamingClient:
    """Connect a streaming client, retrying while a just started streaming server comes up."""
    while True:
        try:
            return await stan.connect("test-cluster", "hardening-pub", url=url,
                                      connect_timeout=1.0, max_reconnect_attempts=0)
        except ERRORS as e:
            if now() > deadline:
                raise GaveUp(f"no streaming server answered: {e}") from None


class AckGaps:
    """The longest time between two PubAcks (or the start and the first one)."""

    def __init__(self, start: float) -> None:
        self.last = start
        self.gap = 0.0
        self.acks = 0
        self.errors = 0

    def __call__(self, _guid: str, error: stan.StanError | None) -> None:
        t = now()
        self.gap = max(self.gap, t - self.last)
        self.last = t
        self.acks += 1
        self.errors += error is not None


async def streaming_stuck(s: Session) -> Figures:
    stuck = await s.subscribe("stuck-all", ">", STUCK_RCVBUF)
    stuck.stop_reading()
    probe = await s.ping_probe()
    sc = await stan_connect(s.server.url, now() + s.size.limit)
    s.closers.append(sc.close)
    payload = b"x" * 1024
    start = now()
    watch = s.close_watch(stuck, start)
    gaps = AckGaps(start)
    end = start + s.size.flood
    outcome = ""

    async def burst() -> None:
        for _ in range(100):
            await sc.publish_async("hardening.stuck", payload, ack_handler=gaps)

    while now() < end and not outcome:
        if not await within(burst(), end + s.size.limit):
            outcome = "publish blocked"
        await asyncio.sleep(0)
    flood_end = now()
    gap = max(gaps.gap, flood_end - gaps.last)
    if not outcome and not await within(sc.wait_pub_acks(), now() + s.size.limit):
        outcome = "PubAcks missing"
    await probe.finish(now() + s.size.limit)
    await watch.wait(start + STUCK_WATCH)
    errors = f"{gaps.errors:,} PubAck errors" if gaps.errors else ""
    return {"gap": seconds_as_ms(gap, ">" if outcome else "", outcome or errors),
            "acks": Figure(gaps.acks / (flood_end - start)), "probe": probe.worst(),
            "closed": watch.figure()}


async def deep_subject(s: Session) -> Figures:
    wildcard = await s.subscribe("deep-wildcard", ".".join(["*"] * DEEP_TOKENS))
    subject = ".".join(["t"] * DEEP_TOKENS)
    exact = await s.subscribe("deep-exact", subject)
    pub = await s.open("deep-pub")
    out: Figures = {}
    try:
        pub.send(pub_frame(subject, b"hello") + PING)
        kept = await within(pub.pong(), now() + s.size.limit)
        out["publisher"] = Figure(text="kept" if kept else "no PONG")
    except ERRORS as e:
        out["publisher"] = Figure(text=f"dropped ({e})")
    for key, conn in (("wildcard", wildcard), ("exact", exact)):
        conn.msgs = 0
        try:
            answered = await within(conn.flush(), now() + s.size.limit)
            got = "yes" if conn.msgs else "no"
            out[key] = Figure(text=got if answered else "no PONG")
        except ERRORS as e:
            out[key] = Figure(text=f"dropped ({e})")
    return out


# -- the harness -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Metric:
    key: str
    title: str
    unit: str = ""
    better: str = "lower"  # "lower", "higher", or "" (information)


@dataclass(frozen=True)
class Workload:
    name: str
    run: Callable[[Session], Awaitable[Figures]]
    metrics: tuple[Metric, ...]
    options: dict[str, Any] = field(default_factory=dict)  # server options, on both servers
    streaming: bool = False


PROBE_MAX = Metric("probe", "probe PING max", "ms")
SLOW_CONSUMER_METRICS = (
    Metric("gap", "healthy subscriber max gap", "ms"),
    Metric("stall", "publisher longest blocked write", "ms"),
    Metric("req_p99", "request/reply p99", "ms"),
    Metric("req_max", "request/reply max", "ms"), PROBE_MAX,
    Metric("closed", "stuck consumer closed after", "s", ""),
    Metric("rate", "published", "MiB/s", "higher"))
PACED_RATE = 16.0  # MiB/s of slow-consumer-16: what the reference lets the unpaced flood do
WORKLOADS = (
    Workload("sub-churn", sub_churn, (
        Metric("pairs", "wildcard SUB+UNSUB, full cache", "pairs/s", "higher"), PROBE_MAX)),
    Workload("close-wildcards", close_wildcards, (PROBE_MAX,)),
    Workload("unsub-reverse", unsub_reverse, (
        Metric("pong", "UNSUB all → PONG", "ms"), PROBE_MAX)),
    Workload("long-ping", long_ping, (
        Metric("answer", "line sent → probe answered", "ms"), PROBE_MAX,
        Metric("rss", "server peak RSS growth", "MiB"),
        Metric("outcome", "sender's connection", better=""))),
    Workload("slow-consumer", slow_consumer, SLOW_CONSUMER_METRICS),
    Workload("slow-consumer-16", functools.partial(slow_consumer, rate=PACED_RATE),
             SLOW_CONSUMER_METRICS),
    Workload("streaming-stuck", streaming_stuck, (
        Metric("gap", "longest PubAck gap", "ms"),
        Metric("acks", "PubAcks", "acks/s", "higher"), PROBE_MAX,
        Metric("closed", "stuck `>` closed after", "s", "")), streaming=True),
    Workload("deep-subject", deep_subject, (
        Metric("wildcard", "1,500-token `*` subscriber got it", better=""),
        Metric("exact", "exact subscriber got it", better=""),
        Metric("publisher", "publisher connection", better="")),
        options={"max_control_line": 65536}),
)


@contextlib.contextmanager
def serve(side: str, workload: Workload) -> Iterator[Server]:
    """A fresh server for one workload run; for streaming, the reference gets a tidings
    streaming server as a separate process (there is no reference streaming server here)."""
    if side == TIDINGS:
        extra = [] if workload.streaming else ["--no_streaming"]
        server = start_tidings(extra_args=extra, **workload.options)
    else:
        server = start_reference(**workload.options)
    helper: subprocess.Popen[bytes] | None = None
    try:
        if workload.streaming and side == REFERENCE:
            helper = subprocess.Popen([sys.executable, "-m", "tidings", "streaming", "-q",
                                       "--nats", server.url], stdin=subprocess.DEVNULL)
        yield server
    finally:
        if helper is not None:
            helper.terminate()
            try:
                helper.wait(5)
            except subprocess.TimeoutExpired:
                helper.kill()
                helper.wait(5)
        server.stop()


async def run_once(side: str, workload: Workload, size: Size) -> Figures:
    with serve(side, workload) as server:
        session = Session(server, size)
        try:
            return await asyncio.wait_for(workload.run(session), size.hard_limit)
        except GaveUp as e:
            text = f"gave up: {e}"
        except asyncio.TimeoutError:
            text = f"gave up after {size.hard_limit:g} s"
        except ERRORS as e:
            text = f"error: {e or type(e).__name__}"
        finally:
            await session.end()
        return {m.key: Figure(text=text) for m in workload.metrics}


def ratio(ours: Figure, theirs: Figure) -> str:
    if ours.value is None or theirs.value is None or not theirs.value:
        return ""
    if ours.bound and theirs.bound:
        return "?"
    bound = ours.bound or {">": "<", "<": ">"}.get(theirs.bound, "")
    x = ours.value / theirs.value
    return f"{bound} {x:.2f}".strip() if x >= 0.1 else f"{bound} {x:.2g}".strip()


def table(rows: list[tuple[Workload, Figures, Figures | None]]) -> Table:
    compared = any(theirs is not None for _, _, theirs in rows)
    title = ("issue 9 hardening: tidings vs reference nats-server (ratio = tidings / reference)"
             if compared else "issue 9 hardening: tidings")
    out = Table(title=title, title_justify="left")
    for name in ("workload", "metric", "unit", "better"):
        out.add_column(name)
    for name in ("tidings", "reference", "ratio") if compared else ("tidings",):
        out.add_column(name, justify="right")
    for workload, ours, theirs in rows:
        for i, m in enumerate(workload.metrics):
            mine = ours.get(m.key, Figure())
            cells = [workload.name if i == 0 else "", m.title, m.unit, m.better, mine.show()]
            if theirs is not None:
                other = theirs.get(m.key, Figure())
                cells += [other.show(), ratio(mine, other)]
            out.add_row(*cells, end_section=i == len(workload.metrics) - 1)
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    names = [w.name for w in WORKLOADS]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", metavar="NAME[,NAME]",
                   help=f"only these workloads, of: {', '.join(names)}")
    p.add_argument("--quick", action="store_true",
                   help="smaller sizes, 2 s floods and 10 s bounds instead of 5 s and 20 s")
    p.add_argument("--tidings-only", action="store_true", help="do not run the reference")
    p.add_argument("--limit", type=float, help="seconds a workload waits for a server")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = p.parse_args(argv)
    unknown = set(args.only.split(",")) - set(names) if args.only else set()
    if unknown:
        p.error(f"unknown workload(s) {', '.join(sorted(unknown))}; known: {', '.join(names)}")
    return args


async def run_all(workloads: list[Workload], sides: list[str], size: Size,
                  console: Console) -> list[tuple[Workload, Figures, Figures | None]]:
    rows = []
    for workload in workloads:
        figures: dict[str, Figures] = {}
        for side in sides:
            started = now()
            console.print(f"  {workload.name} on {side} ...", end="")
            figures[side] = await run_once(side, workload, size)
            console.print(f" {now() - started:.1f} s")
        rows.append((workload, figures[TIDINGS], figures.get(REFERENCE)))
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The servers and `tidings streaming` started from here run this checkout's code.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    size = QUICK if args.quick else FULL
    if args.limit:
        size = replace(size, limit=args.limit)
    wanted = set(args.only.split(",")) if args.only else None
    workloads = [w for w in WORKLOADS if wanted is None or w.name in wanted]
    sides = [TIDINGS] if args.tidings_only else [TIDINGS, REFERENCE]
    console = Console(stderr=True)
    started = now()
    try:
        rows = asyncio.run(run_all(workloads, sides, size, console))
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]")
        return 130
    except RuntimeError as e:  # a server did not start
        console.print(f"[red]error:[/red] {e}")
        return 2
    out = Console() if sys.stdout.isatty() else Console(width=150)
    out.print(table(rows))
    out.print(f"[dim]{'quick' if args.quick else 'full'} sizes; a workload gives up after "
              f"{size.limit:g} s without an answer ('>' marks such figures); streaming-stuck's "
              f"reference is nats-server with `tidings streaming` on it; {os.cpu_count()} cpus; "
              f"{now() - started:.0f} s in all[/dim]")
    if args.json:
        write_json(args.json, {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "size": asdict(size),
            "rows": [{"workload": w.name, "metric": m.title, "unit": m.unit, "better": m.better,
                      "tidings": asdict(ours.get(m.key, Figure())),
                      "reference": None if theirs is None else asdict(theirs.get(m.key, Figure()))}
                     for w, ours, theirs in rows for m in w.metrics],
        })
    return 0


if __name__ == "__main__":
    sys.exit(main())
