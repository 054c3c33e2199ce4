"""Import of a reference nats-streaming-server file store, written here by a small writer."""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from zlib import crc32

import pytest

from tidings.streaming.importref import ReferenceStoreError, import_reference
from tidings.streaming.pb import filestore_pb2 as spb
from tidings.streaming.pb import protocol_pb2 as pb
from tidings.streaming.stores import ClientRecord, Store, open_store

T0 = 1_600_000_000_000_000_000


# --- a writer that follows the documented reference layout ------------------------------


def record(msg: object, rtype: int = 0) -> bytes:
    payload = msg.SerializeToString()  # type: ignore[attr-defined]
    word = rtype << 24 | len(payload) if rtype else len(payload)
    return struct.pack("<II", word, crc32(payload)) + payload


def write_file(path: Path, records: list[bytes], tail: bytes = b"") -> None:
    path.write_bytes(struct.pack("<I", 1) + b"".join(records) + tail)


def write_slice(chan: Path, n: int, msgs: list[pb.MsgProto], tail: bytes = b"") -> None:
    recs = [record(m) for m in msgs]
    write_file(chan / f"msgs.{n}.dat", recs, tail)
    entries, offset = [], 4
    for m, r in zip(msgs, recs, strict=True):
        head = struct.pack("<QQQI", m.sequence, offset, m.timestamp, len(r) - 8)
        entries.append(head + struct.pack("<I", crc32(head)))
        offset += len(r)
    (chan / f"msgs.{n}.idx").write_bytes(struct.pack("<I", 1) + b"".join(entries))


def msg(channel: str, seq: int, reply: str = "") -> pb.MsgProto:
    return pb.MsgProto(
        sequence=seq, subject=channel, reply=reply, data=b"d%d" % seq, timestamp=T0 + seq
    )


def sub_state(sid: int, client: str, durable: str = "", **kw: object) -> spb.SubState:
    return spb.SubState(
        ID=sid,
        clientID=client,
        inbox=f"_INBOX.{sid}",
        ackInbox=f"_STAN.ack.{sid}",
        maxInFlight=1024,
        ackWaitInSecs=30,
        durableName=durable,
        isDurable=bool(durable),
        **kw,
    )


def make_reference(root: Path) -> None:
    root.mkdir()
    (root / ".rootdir.lck").touch()
    info = spb.ServerInfo(ClusterID="ref-cluster", Discovery="_STAN.discover.ref-cluster")
    write_file(root / "server.dat", [record(info)])
    write_file(
        root / "clients.dat",
        [
            record(spb.ClientInfo(ID="c1", HbInbox="_INBOX.hb1", ConnID=b"\x01", Protocol=1), 1),
            record(spb.ClientInfo(ID="c2", HbInbox="_INBOX.hb2"), 1),
            record(spb.ClientDelete(ID="c2"), 2),
            record(spb.ClientInfo(ID="c3", HbInbox="_INBOX.hb3", PingInterval=5, PingMaxOut=3), 1),
        ],
    )
    orders = root / "orders"
    orders.mkdir()
    write_slice(orders, 1, [msg("orders", s, reply="r" if s == 2 else "") for s in range(1, 5)])
    torn = record(msg("orders", 8))[:-3]  # a crash cut the last write short
    write_slice(orders, 2, [msg("orders", s) for s in range(5, 8)], tail=torn)
    upd = spb.SubStateUpdate
    write_file(
        orders / "subs.dat",
        [
            record(sub_state(1, "c1", "dur1"), 1),
            record(sub_state(2, "c3"), 1),
            record(sub_state(3, "c3", "gone"), 1),
            *(record(upd(ID=1, seqno=s), 5) for s in (1, 2, 3, 4)),
            record(upd(ID=1, seqno=1), 4),
            record(upd(ID=1, seqno=2), 4),
            record(sub_state(1, "c1", "dur1", lastSent=4, isClosed=True), 2),
            record(upd(ID=2, seqno=1), 5),
            record(spb.SubStateDelete(ID=3), 3),
        ],
    )
    events = root / "events.eu"
    events.mkdir()
    # The first slice was removed by limits, and message 13 is missing.
    write_slice(events, 3, [msg("events.eu", s) for s in (10, 11, 12, 14)])


@pytest.fixture(params=["memory", "file"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opts = {"path": tmp_path / "target"} if request.param == "file" else {}
    store = open_store(request.param, **opts)
    yield store
    store.close()


@pytest.fixture
def ref(tmp_path: Path) -> Path:
    root = tmp_path / "ref"
    make_reference(root)
    return root


# --- tests ----------------------------------------------------------------------------


def test_import_channels_messages_clients_and_durables(ref: Path, target: Store) -> None:
    report = import_reference(ref, target)
    assert (report.cluster_id, report.channels, report.messages) == ("ref-cluster", 2, 12)
    assert (report.subscriptions, report.clients) == (1, 2)
    assert any("torn record" in w for w in report.warnings)
    assert any("13..13 missing" in w for w in report.warnings)
    assert target.server_info()["cluster_id"] == "ref-cluster"
    assert sorted(target.channels()) == ["events.eu", "orders"]

    orders = target.get_msgs("orders", 1, 100)
    assert [m.seq for m in orders] == [1, 2, 3, 4, 5, 6, 7]
    assert [m.data for m in orders] == [b"d%d" % s for s in range(1, 8)]
    assert orders[1].reply == "r" and orders[0].reply == ""
    assert [m.timestamp for m in orders] == [T0 + s for s in range(1, 8)]

    events = target.get_msgs("events.eu", 1, 100)
    assert [(m.seq, m.data) for m in events] == [
        (10, b"d10"),
        (11, b"d11"),
        (12, b"d12"),
        (13, b""),
        (14, b"d14"),
    ]

    (sub,) = target.subs("orders")
    assert (sub.client_id, sub.durable_name, sub.is_durable, sub.is_closed) == (
        "c1",
        "dur1",
        True,
        True,
    )
    assert (sub.last_sent, sub.pending, sub.ack_wait, sub.max_in_flight) == (4, {3, 4}, 30, 1024)
    assert (sub.inbox, sub.ack_inbox) == ("_INBOX.1", "_STAN.ack.1")
    assert sorted(c.client_id for c in target.clients()) == ["c1", "c3"]
    assert target.client("c1") == ClientRecord("c1", "_INBOX.hb1", b"\x01", 1, 0, 0)


def test_non_durable_subscriptions_on_request(ref: Path, target: Store) -> None:
    report = import_reference(ref, target, durable_only=False, include_clients=False)
    assert report.clients == 0 and target.clients() == []
    subs = {s.client_id: s for s in target.subs("orders")}
    assert sorted(subs) == ["c1", "c3"]
    assert subs["c3"].pending == {1} and not subs["c3"].is_durable


def test_running_the_import_again_adds_nothing(ref: Path, target: Store) -> None:
    import_reference(ref, target)
    again = import_reference(ref, target)
    assert (again.messages, again.subscriptions) == (0, 0)
    assert target.channel_info("orders").msgs == 7
    assert len(target.subs("orders")) == 1


def test_imported_state_is_durable(ref: Path, tmp_path: Path) -> None:
    store = open_store("file", path=tmp_path / "t")
    import_reference(ref, store)
    store.close()
    with open_store("file", path=tmp_path / "t") as store:
        assert store.first_last("events.eu") == (10, 14)
        assert store.subs("orders")[0].pending == {3, 4}
        assert store.store_msg("orders", "", b"new") == 8


def test_crc_failure_ends_the_file_with_a_warning(ref: Path, target: Store) -> None:
    path = ref / "orders" / "msgs.1.dat"
    raw = bytearray(path.read_bytes())
    raw[raw.index(b"d3")] ^= 0xFF
    path.write_bytes(bytes(raw))
    report = import_reference(ref, target)
    assert any("fails its CRC" in w for w in report.warnings)
    # Messages 3 and 4 are lost with the bad record; the next slice fills the gap empty.
    assert [m.data for m in target.get_msgs("orders", 1, 4)] == [b"d1", b"d2", b"", b""]


def test_not_a_reference_store(tmp_path: Path, target: Store) -> None:
    with pytest.raises(ReferenceStoreError, match="no server.dat"):
        import_reference(tmp_path, target)
    (tmp_path / "server.dat").write_bytes(struct.pack("<I", 7))
    with pytest.raises(ReferenceStoreError, match="unsupported file version 7"):
        import_reference(tmp_path, target)


def test_refuses_a_directory_locked_by_a_running_reference_server(ref: Path) -> None:
    code = textwrap.dedent(
        f"""
        import fcntl, os, sys
        fd = os.open({str(ref / ".rootdir.lck")!r}, os.O_RDWR)
        fcntl.lockf(fd, fcntl.LOCK_EX)
        print("locked", flush=True)
        sys.stdin.readline()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
        with open_store("memory") as store, pytest.raises(ReferenceStoreError, match="running"):
            import_reference(ref, store)
    finally:
        proc.communicate("\n", timeout=30)
