"""The PostgreSQL store across a lost connection: a real server restarted, stopped for a while,
or the store's backend ended, under a store holding messages, subscriptions and pending acks."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.postgres import PgServer
from tidings.streaming.stores import (
    StoreError,
    StoreLockedError,
    StoreUnavailableError,
    StoreWriteError,
    SubRecord,
    open_store,
)
from tidings.streaming.stores.sql import SqlStore

pytestmark = pytest.mark.timeout(120)

BACK = 30  # seconds a store may take to serve again once its database is back (a bound, not
# a measurement: it catches a store that never comes back)


class Opened:
    """Stores opened on one schema of a private PostgreSQL server, closed at the end."""

    def __init__(self, pg: PgServer) -> None:
        self.pg = pg
        self.schema = "t_" + uuid.uuid4().hex[:12]
        self.stores: list[SqlStore] = []

    def open(self) -> SqlStore:
        store = open_store("postgres", dsn=self.pg.dsn, schema=self.schema, cache_msgs=4)
        self.stores.append(store)
        return store

    def admin(self):  # noqa: ANN201 - a psycopg connection
        import psycopg

        conn = psycopg.connect(self.pg.dsn, autocommit=True)
        conn.execute(f"SET search_path TO {self.schema}")
        return conn

    def end_sessions(self) -> None:
        """End the store's sessions as an administrator (or a failover) does."""
        sessions = ("FROM pg_stat_activity "
                    "WHERE application_name LIKE 'tidings streaming pid %%'")
        with self.admin() as conn:
            ended = conn.execute(f"SELECT pg_terminate_backend(pid) {sessions}").fetchall()
            assert ended, "no store session to end"
            # pg_terminate_backend only signals the backend: its session (and the advisory
            # lock it holds) ends when that process has gone, which PostgreSQL tells no one.
            deadline = time.monotonic() + 10
            while conn.execute(f"SELECT count(*) {sessions}").fetchone()[0]:
                assert time.monotonic() < deadline, "the store's sessions did not end"
                time.sleep(0.01)

    def close(self) -> None:
        for store in self.stores:
            with contextlib.suppress(StoreError):  # a store that writes no more says so
                store.close()


@pytest.fixture
def opened(private_postgres: PgServer) -> Iterator[Opened]:
    o = Opened(private_postgres)
    yield o
    o.close()


def available_event(store: SqlStore) -> threading.Event:
    back = threading.Event()
    store.on_available = back.set
    return back


DATA = [b"m%d" % i for i in range(1, 9)]  # more than the stores' cache: old ones are read


def fill(store: SqlStore) -> int:
    """DATA on "foo", a durable subscription with 1 and 2 sent, 1 acked; synced."""
    store.store_msgs("foo", [("", d) for d in DATA])
    sid = store.create_sub("foo", SubRecord(client_id="c", is_durable=True, durable_name="d"))
    store.add_pending("foo", sid, 1)
    store.add_pending("foo", sid, 2)
    store.ack("foo", sid, 1)
    store.sync()
    return sid


def test_a_restart_is_survived_and_nothing_committed_is_lost(opened: Opened) -> None:
    store = opened.open()
    sid = fill(store)
    back = available_event(store)
    opened.pg.restart()
    # The first write finds the connection gone: refused, rolled back, and a new one sought.
    store.store_msg("foo", "", b"refused")
    store.ack("foo", sid, 2)
    with pytest.raises(StoreWriteError):
        store.sync()
    assert store.first_last("foo") == (1, 8)
    assert back.wait(BACK), "the store did not reconnect"
    assert store.store_msg("foo", "", b"d") == 9
    store.sync()
    assert not store.lock_held()  # the lock lapsed with the session: an FT server steps down
    store.close()
    again = opened.open()
    assert [m.data for m in again.get_msgs("foo", 1, 10)] == [*DATA, b"d"]
    sub = again.sub("foo", sid)
    # the ack made while the database was away was kept and written after the reconnection
    assert sub is not None and sub.pending == set()
    assert again.lock_held()


def test_a_database_down_for_longer_is_retried_with_back_off_and_logged(
    opened: Opened, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tidings.streaming")
    store = opened.open()
    sid = fill(store)
    back = available_event(store)
    opened.pg.stop()
    refused = []
    for i in range(3):
        store.store_msg("foo", "", b"down-%d" % i)
        with pytest.raises(StoreWriteError) as exc:
            store.sync()
        refused.append(str(exc.value))
    assert all("database" in e for e in refused), refused
    assert "unavailable (reconnecting)" in refused[-1], refused
    with pytest.raises(StoreUnavailableError):  # reads of old messages too, at once
        store.get_msgs("foo", 1, 8)
    store.ack("foo", sid, 2)  # kept in memory until the database is back

    def tries() -> list[str]:
        return [r.getMessage() for r in caplog.records
                if "reconnection attempt" in r.getMessage()]

    wait_until(lambda: len(tries()) >= 4, "four reconnection tries")
    assert not back.is_set()
    assert all("failed (" in t and "next in" in t for t in tries()), tries()
    assert any("refused" in t.lower() for t in tries()), tries()
    opened.pg.start()
    assert back.wait(BACK), "the store did not reconnect"
    assert any("reconnected" in r.getMessage() for r in caplog.records)
    assert [m.data for m in store.get_msgs("foo", 1, 10)] == DATA
    assert store.store_msg("foo", "", b"d") == 9
    store.sync()
    store.close()
    again = opened.open()
    assert [m.data for m in again.get_msgs("foo", 1, 10)] == [*DATA, b"d"]
    sub = again.sub("foo", sid)
    assert sub is not None and sub.pending == set()


def test_a_commit_cut_off_by_the_loss_is_not_kept(opened: Opened) -> None:
    """The connection dies while a commit is under way: the database may have it though the
    store rolled it back and refused its publishers. After reconnecting, the store removes
    those messages (stood in for here by a row written behind its back) and numbers on."""
    store = opened.open()
    fill(store)
    back = available_event(store)
    opened.end_sessions()
    with opened.admin() as conn:
        channel_id = conn.execute("SELECT id FROM tidings_channels WHERE name = 'foo'").fetchone()[0]
        conn.execute("INSERT INTO tidings_messages (channel_id, seq, ts, reply, data) "
                     "VALUES (%s, 9, 0, '', 'refused')", (channel_id,))
    store.store_msg("foo", "", b"refused")
    with pytest.raises(StoreWriteError):
        store.sync()
    assert back.wait(BACK), "the store did not reconnect"
    assert store.store_msg("foo", "", b"d") == 9
    store.sync()
    store.close()
    again = opened.open()
    assert [m.data for m in again.get_msgs("foo", 1, 10)] == [*DATA, b"d"]


@pytest.mark.parametrize("other_still_open", [True, False])
def test_a_store_another_server_opened_meanwhile_writes_no_more(
    opened: Opened, other_still_open: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """While this store's connection was gone, another server opened the store (and may have
    written to it): whether it still holds the lock or has closed it, this one's state is
    stale, and it refuses every write instead of corrupting the store."""
    caplog.set_level(logging.WARNING, logger="tidings.streaming")
    store = opened.open()
    fill(store)
    opened.end_sessions()
    other = opened.open()
    assert other.store_msg("foo", "", b"other") == 9
    other.sync()
    if not other_still_open:
        other.close()
    store.store_msg("foo", "", b"stale")
    with pytest.raises(StoreWriteError):
        store.sync()  # notices the loss

    def gave_up() -> bool:
        return any(r.levelno == logging.CRITICAL for r in caplog.records)

    wait_until(gave_up, "the store to give up")
    store.store_msg("foo", "", b"stale")
    with pytest.raises(StoreWriteError, match="another server opened the postgres store"):
        store.sync()
    assert not store.lock_held()
    if other_still_open:
        other.close()
    again = opened.open()
    assert [m.data for m in again.get_msgs("foo", 1, 10)] == [*DATA, b"other"]


def wait_until(cond: Callable[[], bool], what: str) -> None:
    """Poll a condition another thread makes true (at most BACK seconds)."""
    stop = threading.Event()
    for _ in range(BACK * 20):
        if cond():
            return
        stop.wait(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_second_store_is_still_refused_while_the_first_holds_the_lock(opened: Opened) -> None:
    store = opened.open()
    fill(store)
    with pytest.raises(StoreLockedError, match="in use by another server"):
        opened.open()
    assert store.lock_held()
