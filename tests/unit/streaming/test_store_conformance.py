"""One behaviour suite for every store kind: memory, file, sqlite, postgres."""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidings.streaming.stores import (
    ChannelLimits,
    ClientRecord,
    MsgRecord,
    Store,
    StoreLimits,
    StoreLockedError,
    StoreWriteError,
    SubRecord,
    TooManyChannelsError,
    TooManySubsError,
    UnknownChannelError,
    UnknownSubscriptionError,
    open_store,
)

KINDS = ["memory", "file", "sqlite", "postgres"]
DURABLE = ["file", "sqlite", "postgres"]
SEC = 1_000_000_000

Opener = Callable[..., Store]


def _opener(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    opened: list[Store] = []
    if kind == "memory":
        opts: dict[str, Any] = {}
    elif kind == "file":
        opts = {"path": tmp_path / "store", "cache_msgs": 4}
    elif kind == "sqlite":
        opts = {"path": str(tmp_path / "store.db"), "cache_msgs": 4}
    else:
        dsn = request.getfixturevalue("postgres_dsn")
        opts = {"dsn": dsn, "schema": "t_" + uuid.uuid4().hex[:12], "cache_msgs": 4}

    def open_(**kw: Any) -> Store:
        store = open_store(kind, **{**opts, **kw})
        opened.append(store)
        return store

    open_.opts = opts  # type: ignore[attr-defined]
    yield open_
    for store in opened:
        store.close()


@pytest.fixture(params=KINDS)
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    yield from _opener(request.param, request, tmp_path)


@pytest.fixture(params=DURABLE)
def durable_opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    yield from _opener(request.param, request, tmp_path)


@pytest.fixture
def store(opener: Opener) -> Store:
    return opener()


def reopen(opener: Opener, store: Store, **kw: Any) -> Store:
    store.sync()
    store.close()
    return opener(**kw)


# --- messages -------------------------------------------------------------------------


def test_store_assigns_sequences_and_lookup_returns_the_message(store: Store) -> None:
    assert store.store_msg("foo", "reply.1", b"one") == 1
    assert list(store.store_msgs("foo", [("", b"two"), ("r", b"three")])) == [2, 3]
    rec = store.lookup("foo", 1)
    assert rec is not None
    assert (rec.seq, rec.subject, rec.reply, rec.data, rec.redelivered) == (
        1,
        "foo",
        "reply.1",
        b"one",
        False,
    )
    assert store.lookup("foo", 3).data == b"three"  # type: ignore[union-attr]
    assert store.lookup("foo", 0) is None
    assert store.lookup("foo", 4) is None
    info = store.channel_info("foo")
    assert (info.msgs, info.bytes, info.first_seq, info.last_seq) == (3, 11, 1, 3)


def test_timestamps_never_go_backwards(store: Store) -> None:
    store.store_msg("foo", "", b"a", timestamp=1000 * SEC)
    store.store_msg("foo", "", b"b", timestamp=999 * SEC)
    store.store_msg("foo", "", b"c", timestamp=1001 * SEC)
    ts = [m.timestamp for m in store.get_msgs("foo", 1, 10)]
    assert ts == [1000 * SEC, 1000 * SEC, 1001 * SEC]


def test_get_msgs_clamps_to_the_stored_range(store: Store) -> None:
    store.store_msgs("foo", [("", bytes([i])) for i in range(20)])
    got = store.get_msgs("foo", 5, 4)
    assert [m.seq for m in got] == [5, 6, 7, 8]
    assert [m.data for m in got] == [bytes([i]) for i in range(4, 8)]
    assert [m.seq for m in store.get_msgs("foo", 18, 100)] == [18, 19, 20]
    assert store.get_msgs("foo", 21, 5) == []
    assert [m.seq for m in store.get_msgs("foo", 0, 2)] == [1, 2]


def test_get_rows_are_get_msgs_as_plain_tuples(store: Store) -> None:
    store.store_msgs("foo", [(f"r{i}", bytes([i])) for i in range(20)])
    for start, count in ((1, 20), (5, 4), (18, 100), (0, 2), (21, 5)):
        assert [tuple(r) for r in store.get_rows("foo", start, count)] == [
            tuple(m) for m in store.get_msgs("foo", start, count)]


def test_channels_are_created_once_and_empty_channels_report_first_1_last_0(
    store: Store,
) -> None:
    assert store.create_channel("a") is True
    assert store.create_channel("a") is False
    assert store.has_channel("a") and not store.has_channel("b")
    assert store.first_last("a") == (1, 0)
    assert store.channel_info("a").msgs == 0
    store.store_msg("b", "", b"x")
    assert sorted(store.channels()) == ["a", "b"]
    with pytest.raises(UnknownChannelError):
        store.lookup("nope", 1)
    with pytest.raises(UnknownChannelError):
        store.channel_info("nope")


def test_max_channels(opener: Opener) -> None:
    store = opener(limits=StoreLimits(max_channels=2))
    store.create_channel("a")
    store.store_msg("b", "", b"x")
    with pytest.raises(TooManyChannelsError, match="too many channels"):
        store.store_msg("c", "", b"x")
    assert store.channels() == ["a", "b"]


def test_max_msgs_drops_oldest_first(opener: Opener) -> None:
    store = opener(limits=StoreLimits(max_msgs=5))
    store.store_msgs("foo", [("", b"%d" % i) for i in range(1, 9)])
    assert store.first_last("foo") == (4, 8)
    assert store.lookup("foo", 3) is None
    assert store.lookup("foo", 4).data == b"4"  # type: ignore[union-attr]
    for i in range(9, 21):
        store.store_msg("foo", "", b"%d" % i)
    assert store.first_last("foo") == (16, 20)
    assert [m.data for m in store.get_msgs("foo", 1, 100)] == [b"%d" % i for i in range(16, 21)]
    assert store.channel_info("foo").msgs == 5


def test_max_bytes_drops_oldest_but_keeps_the_newest(opener: Opener) -> None:
    store = opener(limits=StoreLimits(max_bytes=10))
    store.store_msgs("foo", [("", b"abcd")] * 3)
    assert store.first_last("foo") == (2, 3)
    assert store.channel_info("foo").bytes == 8
    store.store_msg("foo", "", b"x" * 50)
    assert store.first_last("foo") == (4, 4)
    assert store.channel_info("foo").bytes == 50


def test_per_channel_limits_override_the_store_limits(opener: Opener) -> None:
    limits = StoreLimits(
        max_msgs=3,
        channels={"big": ChannelLimits(max_msgs=0), "few.*": ChannelLimits(max_msgs=1)},
    )
    store = opener(limits=limits)
    for name in ("big", "few.x", "other"):
        store.store_msgs(name, [("", b"m")] * 6)
    assert store.channel_info("big").msgs == 6
    assert store.channel_info("few.x").msgs == 1
    assert store.channel_info("other").msgs == 3
    assert store.channel_limits("few.x").max_msgs == 1


def test_max_age_expires_by_timestamp(opener: Opener) -> None:
    store = opener(limits=StoreLimits(max_age=10))
    t0 = 1_700_000_000 * SEC
    store.store_msg("foo", "", b"a", timestamp=t0)
    store.store_msg("foo", "", b"b", timestamp=t0 + 5 * SEC)
    store.store_msg("foo", "", b"c", timestamp=t0 + 8 * SEC)
    assert store.expire_msgs(now=t0 + 9 * SEC) == t0 + 10 * SEC
    assert store.first_last("foo") == (1, 3)
    assert store.expire_msgs(now=t0 + 16 * SEC) == t0 + 18 * SEC
    assert store.first_last("foo") == (3, 3)
    assert store.expire_msgs(now=t0 + 30 * SEC) is None
    assert store.first_last("foo") == (4, 3)
    assert store.channel_info("foo").msgs == 0
    assert store.store_msg("foo", "", b"d") == 4


def test_seq_for_timestamp(store: Store) -> None:
    for i, t in enumerate([10, 20, 20, 30], start=1):
        assert store.store_msg("foo", "", b"x", timestamp=t * SEC) == i
    assert store.seq_for_timestamp("foo", 5 * SEC) == 1
    assert store.seq_for_timestamp("foo", 20 * SEC) == 2
    assert store.seq_for_timestamp("foo", 21 * SEC) == 4
    assert store.seq_for_timestamp("foo", 31 * SEC) == 5
    store.create_channel("empty")
    assert store.seq_for_timestamp("empty", 0) == 1


def test_restore_msgs_keeps_sequences_and_timestamps(store: Store) -> None:
    recs = [MsgRecord(s, s * SEC, "x", f"r{s}", b"d%d" % s) for s in range(100, 105)]
    assert store.restore_msgs("foo", recs) == 5
    assert store.first_last("foo") == (100, 104)
    got = store.lookup("foo", 102)
    assert got is not None and (got.timestamp, got.reply, got.data) == (102 * SEC, "r102", b"d102")
    assert got.subject == "foo"
    with pytest.raises(ValueError, match="expected sequence 105"):
        store.restore_msgs("foo", [MsgRecord(107, 0, "foo", "", b"")])
    assert store.store_msg("foo", "", b"next") == 105


def test_delete_channel_removes_messages_and_subscriptions(store: Store) -> None:
    store.store_msgs("foo", [("", b"a")] * 3)
    store.create_sub("foo", SubRecord(client_id="c"))
    store.delete_channel("foo")
    assert not store.has_channel("foo")
    with pytest.raises(UnknownChannelError):
        store.subs("foo")
    assert store.store_msg("foo", "", b"again") == 1
    assert store.subs("foo") == []


# --- clients and subscriptions --------------------------------------------------------


def test_clients_add_replace_delete(store: Store) -> None:
    store.add_client(ClientRecord("c1", "hb.1", b"\x01\x02", 1, 5, 3))
    store.add_client(ClientRecord("c2", "hb.2"))
    store.add_client(ClientRecord("c1", "hb.new", b"\x03", 1, 6, 4))
    assert store.client("c1") == ClientRecord("c1", "hb.new", b"\x03", 1, 6, 4)
    assert store.delete_client("c2") is True
    assert store.delete_client("c2") is False
    assert [c.client_id for c in store.clients()] == ["c1"]
    assert store.client("c2") is None


def test_subscription_lifecycle(store: Store) -> None:
    store.store_msgs("foo", [("", b"m")] * 5)
    sub = SubRecord(
        client_id="c1",
        inbox="in.1",
        ack_inbox="ack.1",
        queue_group="q",
        durable_name="d",
        max_in_flight=10,
        ack_wait=30,
        is_durable=True,
    )
    sid = store.create_sub("foo", sub)
    sid2 = store.create_sub("foo", SubRecord(client_id="c2"))
    assert sid != sid2 and sid > 0 and sub.id == 0
    for seq in (1, 2, 3):
        store.add_pending("foo", sid, seq)
    assert store.ack("foo", sid, 2) is True
    assert store.ack("foo", sid, 2) is False
    got = store.sub("foo", sid)
    assert got is not None
    assert (got.last_sent, got.pending, got.acked_through) == (3, {1, 3}, 0)
    got.is_closed = True
    got.inbox = "in.new"
    got.pending = set()
    store.update_sub("foo", got)
    after = store.sub("foo", sid)
    assert after is not None
    assert (after.is_closed, after.inbox, after.pending) == (True, "in.new", {1, 3})
    store.delete_sub("foo", sid2)
    assert [s.id for s in store.subs("foo")] == [sid]
    with pytest.raises(UnknownSubscriptionError):
        store.add_pending("foo", sid2, 4)


def test_returned_subscriptions_are_copies(store: Store) -> None:
    sid = store.create_sub("foo", SubRecord(client_id="c"))
    copy = store.sub("foo", sid)
    assert copy is not None
    copy.pending.add(99)
    assert store.sub("foo", sid).pending == set()  # type: ignore[union-attr]


def test_max_subscriptions_per_channel(opener: Opener) -> None:
    store = opener(limits=StoreLimits(max_subs=2))
    store.create_sub("foo", SubRecord(client_id="a"))
    store.create_sub("foo", SubRecord(client_id="b"))
    with pytest.raises(TooManySubsError, match="too many subscriptions per channel"):
        store.create_sub("foo", SubRecord(client_id="c"))
    store.create_sub("bar", SubRecord(client_id="c"))
    assert len(store.subs("foo")) == 2


def test_server_info(store: Store) -> None:
    assert store.server_info() == {}
    store.set_server_info({"cluster_id": "test-cluster"})
    assert store.server_info() == {"cluster_id": "test-cluster"}


# --- durability -----------------------------------------------------------------------


def test_everything_survives_a_reopen(durable_opener: Opener) -> None:
    store = durable_opener()
    store.set_server_info({"cluster_id": "c1"})
    store.store_msgs("foo", [(f"r{i}", b"data-%d" % i) for i in range(1, 51)])
    store.store_msg("bar.baz", "", b"")
    store.store_msg("odd$name/é.%2F", "", b"odd")
    store.create_channel("empty")
    store.add_client(ClientRecord("cli", "hb", b"\x00\xff", 1, 5, 3))
    store.add_client(ClientRecord("gone", "hb"))
    store.delete_client("gone")
    sid = store.create_sub("foo", SubRecord(client_id="cli", durable_name="d", is_durable=True))
    gone = store.create_sub("foo", SubRecord(client_id="cli"))
    for seq in range(1, 11):
        store.add_pending("foo", sid, seq)
    store.sync()  # the acks below then undo pending state that is already written
    for seq in range(1, 6):
        store.ack("foo", sid, seq)
    closed = store.sub("foo", sid)
    assert closed is not None
    closed.is_closed = True
    store.update_sub("foo", closed)
    store.delete_sub("foo", gone)
    before_msgs = store.get_msgs("foo", 1, 100)
    before_subs = store.subs("foo")

    store = reopen(durable_opener, store)
    assert store.server_info() == {"cluster_id": "c1"}
    assert sorted(store.channels()) == ["bar.baz", "empty", "foo", "odd$name/é.%2F"]
    assert store.lookup("odd$name/é.%2F", 1).data == b"odd"  # type: ignore[union-attr]
    assert store.get_msgs("foo", 1, 100) == before_msgs
    assert store.lookup("bar.baz", 1).data == b""  # type: ignore[union-attr]
    assert store.first_last("empty") == (1, 0)
    assert store.clients() == [ClientRecord("cli", "hb", b"\x00\xff", 1, 5, 3)]
    assert store.subs("foo") == before_subs
    assert store.subs("foo")[0].pending == {6, 7, 8, 9, 10}
    assert store.subs("foo")[0].is_closed and store.subs("foo")[0].last_sent == 10
    # Sequences and subscription ids continue after a restart.
    assert store.store_msg("foo", "", b"next") == 51
    assert store.create_sub("foo", SubRecord(client_id="x")) > sid


def test_dropped_messages_stay_dropped_after_reopen(durable_opener: Opener) -> None:
    store = durable_opener(limits=StoreLimits(max_msgs=10))
    for i in range(1, 41):
        store.store_msg("foo", "", b"%d" % i)
    assert store.first_last("foo") == (31, 40)
    store = reopen(durable_opener, store, limits=StoreLimits(max_msgs=0))
    assert store.first_last("foo") == (31, 40)
    assert [m.data for m in store.get_msgs("foo", 1, 100)] == [b"%d" % i for i in range(31, 41)]


def test_sequences_are_not_reused_when_all_messages_expired(durable_opener: Opener) -> None:
    store = durable_opener(limits=StoreLimits(max_age=1))
    store.store_msgs("foo", [("", b"old")] * 3, timestamp=1 * SEC)
    assert store.expire_msgs() is None
    assert store.channel_info("foo").msgs == 0
    store = reopen(durable_opener, store)
    assert store.first_last("foo") == (4, 3)
    assert store.store_msg("foo", "", b"new") == 4


def test_sync_from_another_thread_while_storing(durable_opener: Opener) -> None:
    store = durable_opener()
    stop = threading.Event()
    errors: list[BaseException] = []
    syncs = 0

    def syncer() -> None:
        nonlocal syncs
        try:
            while not stop.is_set():
                store.sync()
                syncs += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=syncer)
    t.start()
    try:
        sid = store.create_sub("foo", SubRecord(client_id="c"))
        for i in range(1, 3001):
            store.store_msg("foo", "", b"%d" % i)
            store.add_pending("foo", sid, i)
            if i % 2 == 0:
                store.ack("foo", sid, i)
            if i % 500 == 0:
                assert store.lookup("foo", i - 250).data == b"%d" % (i - 250)  # type: ignore[union-attr]
    finally:
        stop.set()
        t.join()
    assert errors == []
    assert syncs > 0
    store = reopen(durable_opener, store)
    assert store.first_last("foo") == (1, 3000)
    msgs = store.get_msgs("foo", 1, 5000)
    assert [m.data for m in msgs] == [b"%d" % i for i in range(1, 3001)]
    assert store.subs("foo")[0].pending == set(range(1, 3001, 2))


# --- one server per store ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_second_sql_store_on_the_same_database_is_refused(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    opener = _opener(kind, request, tmp_path)
    open_ = next(opener)
    first = open_()
    first.store_msg("foo", "", b"one")
    first.sync()
    with pytest.raises(StoreLockedError, match=rf"in use by another server \(pid {os.getpid()}\)"):
        open_()
    # the refused store wrote nothing: the first keeps working
    assert first.store_msg("foo", "", b"two") == 2
    first.sync()
    first.close()
    again = open_()
    assert [m.data for m in again.get_msgs("foo", 1, 10)] == [b"one", b"two"]
    next(opener, None)


# --- a database that refuses writes ---------------------------------------------------------


@contextlib.contextmanager
def refusing_inserts(kind: str, opts: dict[str, Any]) -> Iterator[None]:
    """Make the database refuse new messages (another session adds a failing check)."""
    if kind == "sqlite":
        import sqlite3

        db = sqlite3.connect(opts["path"])
        db.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON tidings_messages "
            "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
        )
        db.commit()
        try:
            yield
        finally:
            db.execute("DROP TRIGGER refuse")
            db.commit()
            db.close()
        return
    import psycopg

    table = f"{opts['schema']}.tidings_messages"
    with psycopg.connect(opts["dsn"], autocommit=True) as db:
        db.execute(f"ALTER TABLE {table} ADD CONSTRAINT refuse CHECK (false) NOT VALID")
        try:
            yield
        finally:
            db.execute(f"ALTER TABLE {table} DROP CONSTRAINT refuse")


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_refused_transaction_rolls_back_its_messages_and_the_store_stays_usable(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    opener = _opener(kind, request, tmp_path)
    open_ = next(opener)
    store = open_()
    store.store_msgs("foo", [("", b"a"), ("", b"b")])
    sid = store.create_sub("foo", SubRecord(client_id="c", is_durable=True, durable_name="d"))
    store.sync()
    with refusing_inserts(kind, open_.opts):  # type: ignore[attr-defined]
        store.store_msgs("foo", [("", b"c"), ("", b"d")])
        store.store_msg("bar", "", b"x")
        store.add_pending("foo", sid, 1)
        with pytest.raises(StoreWriteError):
            store.sync()
        assert store.epoch == 1 and store.last_store_epoch == 0
        assert store.first_last("foo") == (1, 2)
        assert store.first_last("bar") == (1, 0)
        assert [m.data for m in store.get_msgs("foo", 1, 10)] == [b"a", b"b"]
        with pytest.raises(StoreWriteError):  # still refused: the next try fails alike
            store.store_msg("foo", "", b"c2")
            store.sync()
        assert store.first_last("foo") == (1, 2)
    assert store.store_msg("foo", "", b"e") == 3
    assert store.sync() == store.epoch == 2  # the epoch "e" was stored in: it is durable
    again = reopen(open_, store)
    assert [m.data for m in again.get_msgs("foo", 1, 10)] == [b"a", b"b", b"e"]
    assert again.first_last("bar") == (1, 0)
    sub = again.sub("foo", sid)
    assert sub is not None and sub.pending == {1}
    next(opener, None)
