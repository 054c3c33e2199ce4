"""`tidings server --store sql --sql_driver postgres` while PostgreSQL restarts or stays down
under a publisher and a manually acknowledging durable subscriber.

While the database is away every publish is answered, with an error PubAck (never a timeout);
every acknowledged message is stored and delivered exactly once as stored; publishes succeed
again once the database is back; subscription state (acks made during the outage) is written
then, and a restarted server resumes from it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.harness import TidingsServer, eventually, workdir
from tests.postgres import PgServer
from tidings.streaming.client import StanError, StreamingClient
from tidings.streaming.client import connect as stan_connect
from tidings.streaming.server.fetch import HEADER, UNAVAILABLE
from tidings.testing.spec import ServerSpec

from .conftest import Inbox
from .test_cli import wait_streaming
from .test_store_failures import Publisher, check, stored_payloads

pytestmark = pytest.mark.timeout(240)

CID = "test-cluster"
BACK = 30.0  # seconds: a bound on serving again once the database is back (it catches a
# server that never does, not a slow one)


class TidingsOnPg:
    """`tidings server` with its streaming server on a PostgreSQL store (the harness's
    server: its log kept over restarts, which are on the same port)."""

    def __init__(self, dsn: str, log_path: Path) -> None:
        self.dsn = dsn
        spec = ServerSpec.from_kwargs(streaming=True, store="sql", args=[
            "--sql_driver", "postgres", "--sql_source", dsn])
        self.server = TidingsServer(spec, workdir(log_path.stem))

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.server.proc

    def start(self) -> None:
        self.server.start()

    def log(self) -> str:
        return self.server.log()

    def lines(self, text: str) -> list[str]:
        return [line for line in self.log().splitlines() if text in line]

    def alive(self) -> bool:
        return self.server.running

    def kill(self) -> None:
        """kill -9: nothing is written at exit."""
        self.server.kill()

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def tidings_on(tmp_path: Path):  # noqa: ANN201 - a factory
    servers: list[TidingsOnPg] = []

    def make(pg: PgServer) -> TidingsOnPg:
        srv = TidingsOnPg(pg.dsn, tmp_path / f"tidings{len(servers)}.log")
        servers.append(srv)
        srv.start()
        return srv

    yield make
    for srv in servers:
        srv.stop()


def count_rows(pg: PgServer, table: str) -> int:
    import psycopg

    with psycopg.connect(pg.dsn) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def pending_rows(pg: PgServer) -> int:
    """Messages sent to subscriptions and not acknowledged, as the database has them."""
    return count_rows(pg, "tidings_pending")


def client_rows(pg: PgServer) -> int:
    return count_rows(pg, "tidings_clients")


class Subscriber:
    """A durable subscription with manual acks that records every delivery; acks at once
    unless told to hold them."""

    def __init__(self) -> None:
        self.inbox = Inbox()
        self.held: list[Any] = []
        self.hold = False

    async def __call__(self, msg: Any) -> None:
        self.inbox(msg)
        if self.hold:
            self.held.append(msg)
        else:
            await msg.ack()

    async def start(self, url: str, client_id: str = "sub") -> StreamingClient:
        sc = await stan_connect(CID, client_id, url=url)
        await sc.subscribe("orders", cb=self, durable_name="dur", manual_acks=True,
                           deliver_all_available=True, max_inflight=1024, ack_wait=60)
        return sc

    def first_deliveries(self) -> list[Any]:
        return [m for m in self.inbox.all if not m.redelivered]

    async def wait_for(self, n: int) -> None:
        await eventually(lambda: len(self.first_deliveries()) >= n, BACK, f"{n} deliveries")


async def publish_until_accepted(pub: Publisher, timeout: float) -> None:
    """Waves of publishes until one is accepted whole (the database is back)."""
    deadline = time.monotonic() + timeout
    while await pub.wave(10):
        assert time.monotonic() < deadline, "publishes are still refused: " + \
            repr(list(pub.nacked.values())[-1:])
        await asyncio.sleep(0.02)  # pacing (the refusals come at once), not synchronisation


def check_deliveries(sub: Subscriber, stored: list[bytes], pub: Publisher) -> None:
    """Each stored message delivered once, in order, exactly as stored; nothing refused."""
    first = [m for m in sub.first_deliveries() if m.data != b"sentinel"]  # stored_payloads'
    assert [m.seq for m in first] == list(range(1, len(stored) + 1))
    assert [m.data for m in first] == stored
    assert not {m.data for m in sub.inbox.all} & set(pub.nacked)


async def check_stored_and_delivered(srv: TidingsOnPg, pub: Publisher, sub: Subscriber,
                                     pg: PgServer) -> None:
    """Every acknowledged message is stored and delivered once, as stored; the subscriber's
    acks reach the database."""
    await sub.wait_for(len(pub.acked))
    stored = await stored_payloads(srv.url, "orders")
    check(pub, stored)
    check_deliveries(sub, stored, pub)
    print(f"published {pub.n}: {len(pub.acked)} acked, {len(pub.nacked)} refused:",
          set(pub.nacked.values()))
    await eventually(lambda: pending_rows(pg) == 0, BACK, "the acks to be written")


async def a_new_server_redelivers_nothing(
    pg: PgServer, srv: TidingsOnPg, tidings_on: Callable[[PgServer], TidingsOnPg]
) -> None:
    """The durable state written after the outage: a server started on it after a kill -9
    of this one resumes from it, and nothing acknowledged comes back."""
    await eventually(lambda: client_rows(pg) == 0, BACK, "the clients' close to be written")
    srv.kill()
    again = tidings_on(pg)
    await wait_streaming(again.url)
    resumed = Subscriber()
    sc2 = await resumed.start(again.url)
    try:
        await sc2.publish("orders", b"after")
        await resumed.wait_for(1)
        assert [m.data for m in resumed.inbox.all] == [b"after"]
    finally:
        await sc2.close()


async def test_a_postgresql_restart_under_publishers_and_subscribers(
    private_postgres: PgServer, tidings_on: Callable[[PgServer], TidingsOnPg]
) -> None:
    pg = private_postgres
    srv = tidings_on(pg)
    await wait_streaming(srv.url)
    sub = Subscriber()
    sub_sc = await sub.start(srv.url)
    sc = await stan_connect(CID, "pub", url=srv.url, ack_timeout=10, max_pub_acks_inflight=32)
    pub = Publisher(sc, "orders", 200)
    try:
        assert await pub.wave(50) == 0
        stop = asyncio.Event()

        async def keep_publishing() -> None:
            while not stop.is_set():
                await pub.wave(10)

        task = asyncio.create_task(keep_publishing())
        await asyncio.to_thread(pg.restart)  # under the publisher and the subscriber
        stop.set()
        await task
        await publish_until_accepted(pub, BACK)
        assert await pub.wave(50) == 0
        assert srv.lines("postgres store: the connection is lost")
        assert srv.lines("postgres store: reconnected")
        assert all("database" in e for e in pub.nacked.values()), set(pub.nacked.values())
        await check_stored_and_delivered(srv, pub, sub, pg)
    finally:
        await sc.close()
        await sub_sc.close()
    await a_new_server_redelivers_nothing(pg, srv, tidings_on)


async def test_a_database_down_for_longer_keeps_the_server_up_and_retrying(
    private_postgres: PgServer, tidings_on: Callable[[PgServer], TidingsOnPg]
) -> None:
    pg = private_postgres
    srv = tidings_on(pg)
    await wait_streaming(srv.url)
    sub = Subscriber()
    sub.hold = True  # acks the first messages only while the database is down
    sub_sc = await sub.start(srv.url)
    sc = await stan_connect(CID, "pub", url=srv.url, ack_timeout=10, max_pub_acks_inflight=32)
    pub = Publisher(sc, "orders", 100)
    try:
        assert await pub.wave(20) == 0
        await sub.wait_for(20)
        await asyncio.to_thread(pg.stop)
        assert await pub.wave(10) == 10  # refused at once, with an error PubAck
        assert all("database" in e for e in pub.nacked.values()), set(pub.nacked.values())
        for msg in sub.held:
            await msg.ack()
        sub.hold = False
        await eventually(lambda: len(srv.lines("reconnection attempt")) >= 4, BACK,
                   "the server's reconnection tries")
        assert all("failed (" in line for line in srv.lines("reconnection attempt"))
        assert srv.alive()
        assert await pub.wave(5) == 5  # still up, still answering
        assert not [e for e in pub.nacked.values() if "timeout" in e.lower()]
        await asyncio.to_thread(pg.start)
        await publish_until_accepted(pub, BACK)
        assert srv.lines("postgres store: reconnected")
        assert await pub.wave(20) == 0
        # (the acks given while the database was down are written once it is back)
        await check_stored_and_delivered(srv, pub, sub, pg)
    finally:
        await sc.close()
        await sub_sc.close()
    await a_new_server_redelivers_nothing(pg, srv, tidings_on)


async def test_a_publish_to_a_server_whose_database_is_down_is_not_left_hanging(
    private_postgres: PgServer, tidings_on: Callable[[PgServer], TidingsOnPg]
) -> None:
    """A synchronous publish gets its error PubAck, not the client's ack timeout."""
    pg = private_postgres
    srv = tidings_on(pg)
    await wait_streaming(srv.url)
    sc = await stan_connect(CID, "one", url=srv.url, ack_timeout=20)
    try:
        await sc.publish("orders", b"before")
        await asyncio.to_thread(pg.stop)
        for _ in range(3):
            with pytest.raises(StanError, match="database") as exc:
                await sc.publish("orders", b"refused")
            assert "timeout" not in str(exc.value).lower()
        await asyncio.to_thread(pg.start)
        await eventually(lambda: srv.lines("postgres store: reconnected"), BACK, "the reconnection")
        await sc.publish("orders", b"after")
    finally:
        await sc.close()
    stored = await stored_payloads(srv.url, "orders")
    assert stored == [b"before", b"after"]


async def test_deliveries_that_need_the_database_wait_for_it(
    private_postgres: PgServer, tidings_on: Callable[[PgServer], TidingsOnPg]
) -> None:
    """Old messages (past the store's in-memory cache) are read from the database: while it
    is down, a new subscription gets nothing and a bulk fetch is answered "unavailable"
    (no traceback, no hang); once it is back, every message is delivered, in order."""
    pg = private_postgres
    srv = tidings_on(pg)
    await wait_streaming(srv.url)
    sc = await stan_connect(CID, "pub", url=srv.url, ack_timeout=10, max_pub_acks_inflight=256)
    pub = Publisher(sc, "orders", 32)
    reader = await stan_connect(CID, "reader", url=srv.url)
    try:
        assert await pub.wave(3000) == 0  # more than the default cache of 1024 messages
        await asyncio.to_thread(pg.stop)
        inbox = Inbox()
        await reader.subscribe("orders", cb=inbox, deliver_all_available=True,
                               max_inflight=4096)
        reply = await reader.nc.request(f"_TIDINGS.fetch.{CID}", json.dumps(
            {"channel": "orders", "start": 1, "end": 10}).encode(), timeout=5)
        status = HEADER.unpack_from(reply.data)[1]
        assert status == UNAVAILABLE, reply.data
        await eventually(lambda: srv.lines("streaming store read failed"), BACK, "the read failure")
        assert inbox.empty()
        await asyncio.to_thread(pg.start)
        got = await inbox.take(3000, timeout=BACK)
        assert [m.seq for m in got] == list(range(1, 3001))
        assert [m.data for m in got] == [pub.payload(i) for i in range(3000)]
    finally:
        await reader.close()
        await sc.close()
    assert "Traceback" not in srv.log()
