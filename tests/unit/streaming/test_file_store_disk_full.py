"""The file store on a full disk: failures injected at the OS layer (os.write, fdatasync).

A failed write or fsync must roll the store back to its last synced record: nothing of the
failed batch is kept, nothing torn is left in a file, and the store keeps working once space
returns. Recovery never drops valid records that follow a damaged one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faultydisk import Disk
from tidings.streaming.stores import CorruptStoreError, StoreWriteError, SubRecord
from tidings.streaming.stores.file import FileStore
from tidings.streaming.stores.segments import DAT_MAGIC


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    yield Disk(tmp_path, monkeypatch)


def payloads(first: int, n: int, size: int = 100) -> list[bytes]:
    return [(b"m%d-" % i).ljust(size, b"x") for i in range(first, first + n)]


def datas(store: FileStore, channel: str = "foo") -> list[bytes]:
    return [m.data for m in store.get_msgs(channel, 1, 100_000)]


def test_a_batch_torn_by_a_full_disk_is_rolled_back_and_later_writes_are_clean(
    tmp_path: Path, disk: Disk
) -> None:
    store = FileStore(tmp_path)
    store.store_msgs("foo", [("", d) for d in payloads(1, 10)])
    store.sync()
    disk.room = 150  # the first record of the next batch is torn
    store.store_msgs("foo", [("", d) for d in payloads(11, 5)])
    assert store.last_store_epoch == store.epoch == 0
    with pytest.raises(StoreWriteError, match="No space left on device"):
        store.sync()
    assert store.epoch == 1  # what was stored in epoch 0 and not synced is gone
    assert store.first_last("foo") == (1, 10)
    assert datas(store) == payloads(1, 10)
    disk.room = None  # space is back
    assert store.store_msgs("foo", [("", d) for d in payloads(11, 3)]) == range(11, 14)
    assert store.last_store_epoch == 1
    store.sync()
    assert datas(store) == payloads(1, 13)
    store.close()
    with FileStore(tmp_path) as again:
        assert again.first_last("foo") == (1, 13)
        assert datas(again) == payloads(1, 13)


def test_a_write_failing_while_storing_rolls_back_every_unsynced_message(
    tmp_path: Path, disk: Disk
) -> None:
    store = FileStore(tmp_path)
    store.store_msgs("foo", [("", d) for d in payloads(1, 10)])
    store.sync()
    store.store_msgs("foo", [("", d) for d in payloads(11, 2)])  # buffered, not synced
    store.store_msg("bar", "", b"unsynced")
    disk.room = 4096
    # more than the write buffer: written (and torn) while storing, not at sync
    with pytest.raises(StoreWriteError):
        store.store_msgs("foo", [("", d) for d in payloads(13, 3, size=600_000)])
    assert store.first_last("foo") == (1, 10)
    assert store.first_last("bar") == (1, 0)
    disk.room = None
    assert store.store_msg("foo", "", b"after") == 11
    store.sync()
    store.close()
    with FileStore(tmp_path) as again:
        assert datas(again) == [*payloads(1, 10), b"after"]
        assert again.first_last("bar") == (1, 0)


def test_a_sync_reports_its_epoch_and_a_later_rollback_keeps_what_it_covered(
    tmp_path: Path, disk: Disk
) -> None:
    store = FileStore(tmp_path)
    store.store_msgs("foo", [("", d) for d in payloads(1, 3)])
    assert store.sync() == 0  # what was stored in epoch 0 is durable
    disk.room = 4096
    with pytest.raises(StoreWriteError):  # written (and torn) while storing: a rollback
        store.store_msgs("foo", [("", d) for d in payloads(4, 3, size=600_000)])
    assert store.epoch == 1
    assert datas(store) == payloads(1, 3)  # the rollback kept what the sync covered
    disk.room = None
    assert store.store_msg("foo", "", b"after") == 4
    assert store.sync() == 1
    store.close()
    with FileStore(tmp_path) as again:
        assert datas(again) == [*payloads(1, 3), b"after"]


def test_a_failed_fsync_rolls_back_the_batch(tmp_path: Path, disk: Disk) -> None:
    store = FileStore(tmp_path)
    store.store_msgs("foo", [("", d) for d in payloads(1, 4)])
    store.sync()
    store.store_msgs("foo", [("", d) for d in payloads(5, 4)])
    disk.fsync_errors = 1
    with pytest.raises(StoreWriteError, match="Input/output error"):
        store.sync()
    assert store.first_last("foo") == (1, 4)
    assert store.store_msg("foo", "", b"after") == 5
    store.sync()
    store.close()
    with FileStore(tmp_path) as again:
        assert datas(again) == [*payloads(1, 4), b"after"]


def test_a_rotation_failing_on_a_full_disk_rolls_back_to_the_old_segment(
    tmp_path: Path, disk: Disk
) -> None:
    store = FileStore(tmp_path, segment_bytes=4096)
    store.store_msgs("foo", [("", d) for d in payloads(1, 30)])  # several segments
    store.sync()
    disk.room = 0
    with pytest.raises(StoreWriteError):
        for i in range(31, 100):
            store.store_msg("foo", "", payloads(i, 1)[0])
            store.sync()
    disk.room = None
    last = store.first_last("foo")[1]
    assert last == 30
    store.store_msgs("foo", [("", d) for d in payloads(31, 40)])
    store.sync()
    store.close()
    with FileStore(tmp_path, segment_bytes=4096) as again:
        assert datas(again) == payloads(1, 70)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("segment_bytes", [64 << 20, 4096])
def test_writes_refused_on_a_disk_that_stays_full_do_not_pile_up_descriptors(
    tmp_path: Path, disk: Disk, segment_bytes: int
) -> None:
    store = FileStore(tmp_path, segment_bytes=segment_bytes)
    store.store_msgs("foo", [("", d) for d in payloads(1, 12, size=1000)])
    store.sync()  # with 4096-byte segments the last one is full: every next write rotates
    disk.room = 0
    before = open_fds()
    for i in range(13, 113):
        with pytest.raises(StoreWriteError):
            store.store_msg("foo", "", payloads(i, 1, size=1000)[0])
            store.sync()
    assert open_fds() <= before
    disk.room = None
    assert store.store_msg("foo", "", b"after") == 13
    store.sync()
    store.close()
    with FileStore(tmp_path, segment_bytes=segment_bytes) as again:
        assert datas(again) == [*payloads(1, 12, size=1000), b"after"]


def test_subscription_records_are_kept_and_written_once_space_returns(
    tmp_path: Path, disk: Disk
) -> None:
    store = FileStore(tmp_path)
    store.store_msgs("foo", [("", d) for d in payloads(1, 3)])
    sid = store.create_sub("foo", SubRecord(client_id="c", is_durable=True, durable_name="d"))
    store.sync()
    disk.room = 20
    store.add_pending_many("foo", sid, [1, 2, 3])
    store.ack("foo", sid, 1)
    with pytest.raises(StoreWriteError):
        store.sync()
    disk.room = None
    store.sync()
    store.close()
    with FileStore(tmp_path) as again:
        sub = again.sub("foo", sid)
        assert sub is not None and sub.pending == {2, 3} and sub.last_sent == 3


def _records(seg: Path) -> tuple[bytes, list[bytes]]:
    raw = seg.read_bytes()
    pos, out = len(DAT_MAGIC), []
    while pos < len(raw):
        size = int.from_bytes(raw[pos : pos + 4], "little")
        out.append(raw[pos : pos + 8 + size])
        pos += 8 + size
    return raw[: len(DAT_MAGIC)], out


def test_recovery_refuses_to_drop_records_written_after_a_torn_one(tmp_path: Path) -> None:
    with FileStore(tmp_path) as store:
        store.store_msgs("foo", [("", d) for d in payloads(1, 8)])
        store.sync()
    (seg,) = sorted((tmp_path / "channels" / "foo").glob("msgs.*.dat"))
    magic, recs = _records(seg)
    # what the old code left after a full disk: record 6 torn, then 6..8 written again
    torn = len(magic) + sum(len(r) for r in recs[:5])
    damaged = magic + b"".join(recs[:5]) + recs[5][:40] + b"".join(recs[5:])
    seg.write_bytes(damaged)
    with pytest.raises(CorruptStoreError, match=f"{seg.name}: corrupt record at offset {torn}"):
        FileStore(tmp_path)
    assert seg.read_bytes() == damaged  # nothing was truncated


def test_recovery_refuses_to_drop_subscription_records_after_a_torn_one(
    tmp_path: Path,
) -> None:
    with FileStore(tmp_path) as store:
        sid = store.create_sub("foo", SubRecord(client_id="c"))
        store.sync()
        start = (tmp_path / "channels" / "foo" / "subs.log").stat().st_size
        store.add_pending_many("foo", sid, [1, 2, 3])
        store.sync()
    log = tmp_path / "channels" / "foo" / "subs.log"
    raw = log.read_bytes()
    tail = raw[start:]
    log.write_bytes(raw[:start] + tail[:10] + tail)
    with pytest.raises(CorruptStoreError, match=f"corrupt record at offset {start}"):
        FileStore(tmp_path)
    assert log.read_bytes() == raw[:start] + tail[:10] + tail


def test_closing_on_a_full_disk_keeps_the_synced_records_and_unlocks(
    tmp_path: Path, disk: Disk
) -> None:
    store = FileStore(tmp_path)
    store.store_msgs("foo", [("", d) for d in payloads(1, 3)])
    store.sync()
    store.store_msgs("foo", [("", d) for d in payloads(4, 3)])
    disk.room = 10
    with pytest.raises(StoreWriteError):
        store.close()
    disk.room = None
    with FileStore(tmp_path) as again:  # the lock was released
        assert datas(again) == payloads(1, 3)
