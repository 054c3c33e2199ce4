"""JetStream's file store and streams on a full disk: failures injected at the OS layer
(tests/faultydisk.py: os.write cut short then ENOSPC; fsyncs that fail with EIO) and, for
files written through Python's file objects (a stream's configuration, a consumer's
state), a file size limit (RLIMIT_FSIZE: EFBIG, as a full disk refuses).

A write that does not fit must store nothing (no torn bytes left in a block, nothing a
reopened store would read back), the publish is refused with the reference's error for a
failed store (JSStreamStoreFailedF: 503, err_code 10077, the OS's error), never
acknowledged; the store keeps working once there is room again, and a restart on the full
disk loses nothing.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faultydisk import Disk, file_size_limit
from tidings.jetstream import filestore
from tidings.jetstream.consumer import Consumer
from tidings.jetstream.consumer_config import normalize as consumer_config
from tidings.jetstream.errors import ApiError
from tidings.jetstream.filestore import FileStore, msg_size
from tidings.jetstream.stream import Stream, normalize


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    """A disk that fills up; os.fsync fails as its fdatasync does (fsync_errors)."""
    faulty = Disk(tmp_path, monkeypatch)
    monkeypatch.setattr(os, "fsync", faulty.fdatasync)
    yield faulty


def sizes(path: Path) -> dict[str, int]:
    """Every file under `path` and its size."""
    return {str(p.relative_to(path)): p.stat().st_size for p in sorted(path.rglob("*"))
            if p.is_file()}


def contents(store: FileStore) -> dict[int, tuple[str, bytes | None, bytes]]:
    out = {}
    for seq in range(store.first_seq, store.last_seq + 1):
        msg = store.get(seq)
        if msg is not None:
            out[seq] = (msg.subject, msg.headers, msg.data)
    return out


def reopened(path: Path, **kw: Any) -> dict[int, tuple[str, bytes | None, bytes]]:
    """What a store opened anew on the files reads back (the running one stays open)."""
    again = FileStore(path, **kw)
    try:
        return contents(again)
    finally:
        again.close()


# -- the store -----------------------------------------------------------------------------
@pytest.mark.parametrize("sync_always", [False, True])
def test_a_message_that_does_not_fit_stores_nothing(tmp_path: Path, disk: Disk,
                                                    sync_always: bool) -> None:
    store = FileStore(tmp_path, sync_always=sync_always)
    for i in range(5):
        store.store("a", b"NATS/1.0\r\nk: v\r\n\r\n" if i % 2 else None, b"m%d" % i)
    before, files = contents(store), sizes(tmp_path)
    disk.room = 20  # the record's first 20 bytes reach the file, then ENOSPC
    with pytest.raises(OSError) as raised:
        store.store("a", None, b"x" * 100)
    assert raised.value.errno == errno.ENOSPC
    assert (store.count, store.last_seq, contents(store)) == (5, 5, before)
    assert sizes(tmp_path) == files  # no torn bytes left behind
    assert reopened(tmp_path) == before
    disk.room = None
    assert store.store("a", None, b"after").seq == 6
    assert reopened(tmp_path) == {**before, 6: ("a", None, b"after")}
    store.close()


def test_a_new_block_that_does_not_fit_is_not_left_behind(tmp_path: Path, disk: Disk) -> None:
    size = msg_size("a", None, b"v" * 100)
    store = FileStore(tmp_path, block_size=3 * size)
    for _ in range(3):
        store.store("a", None, b"v" * 100)
    files = sizes(tmp_path)
    disk.room = 0  # the next message starts a block: its file cannot be written
    with pytest.raises(OSError):
        store.store("a", None, b"w" * 100)
    assert sizes(tmp_path) == files and store.last_seq == 3
    disk.room = None
    assert store.store("a", None, b"w" * 100).seq == 4
    assert len(sizes(tmp_path)) == 2
    assert reopened(tmp_path, block_size=3 * size)[4] == ("a", None, b"w" * 100)
    store.close()


def test_a_removal_that_does_not_fit_removes_nothing(tmp_path: Path, disk: Disk) -> None:
    store = FileStore(tmp_path)
    for i in range(4):
        store.store("a", None, b"m%d" % i)
    disk.room = 5
    with pytest.raises(OSError):
        store.remove(2)
    assert store.get(2) is not None and store.count == 4
    with pytest.raises(OSError):
        store.purge()
    assert store.count == 4 and len(reopened(tmp_path)) == 4
    disk.room = None
    assert store.remove(2) and store.purge() == 3
    assert reopened(tmp_path) == {} and store.store("a", None, b"x").seq == 5
    store.close()


def test_a_new_block_whose_directory_entry_is_not_synced_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With sync_always, a message in a new block is acknowledged once the block's
    directory entry is synced too; when that fails, the message is refused and the block
    goes, so the next message (acknowledged, at the same sequence) is the one read back."""
    size = msg_size("a", None, b"v" * 100)
    store = FileStore(tmp_path, block_size=2 * size, sync_always=True)
    store.store("a", None, b"v" * 100)
    store.store("a", None, b"v" * 100)
    real = filestore.fsync_dir

    def fails(path: Path | str) -> None:
        monkeypatch.setattr(filestore, "fsync_dir", real)
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(filestore, "fsync_dir", fails)
    with pytest.raises(OSError):
        store.store("a", None, b"refused")
    assert store.last_seq == 2
    assert store.store("a", None, b"acked").seq == 3
    assert store.get(3).data == b"acked"  # type: ignore[union-attr]
    assert reopened(tmp_path, block_size=2 * size)[3] == ("a", None, b"acked")
    store.close()


def test_a_failed_fsync_is_logged_not_raised(tmp_path: Path, disk: Disk,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """The periodic sync (sync_interval) runs in the server's timer: a failing fsync is
    logged, and the store goes on (what it acknowledged was acknowledged before)."""
    store = FileStore(tmp_path)
    store.store("a", None, b"one")
    disk.fsync_errors = 2  # the block's and the directory's
    with caplog.at_level(logging.ERROR, "tidings.jetstream"):
        store.sync()
    assert "Input/output error" in caplog.text
    assert store.store("a", None, b"two").seq == 2
    store.sync()
    assert len(reopened(tmp_path)) == 2
    store.close()


# -- a stream ------------------------------------------------------------------------------
def stream(path: Path, **config: Any) -> Stream:
    cfg = normalize({"subjects": ["s.>"], "storage": "file", **config}, "S")
    return Stream(cfg, str(path / "S"))


def test_a_publish_that_does_not_fit_is_refused_with_the_store_error(
        tmp_path: Path, disk: Disk) -> None:
    st = stream(tmp_path)
    acks = [st.publish("s.1", None, b"m%d" % i) for i in range(3)]
    assert [a["seq"] for a in acks] == [1, 2, 3]
    disk.room = 10
    with pytest.raises(ApiError) as refused:
        st.publish("s.1", None, b"does not fit")
    body = refused.value.as_json()
    assert (body["code"], body["err_code"]) == (503, 10077)
    assert "No space left on device" in body["description"]
    disk.room = None
    assert st.publish("s.1", None, b"fits")["seq"] == 4
    st.close()
    again = Stream.load(str(tmp_path / "S"))
    assert again is not None
    assert [again.store.get(s).data for s in range(1, 5)] == [b"m0", b"m1", b"m2", b"fits"]
    again.close()


def test_a_stored_message_whose_limit_cannot_be_applied_is_acknowledged(
        tmp_path: Path, disk: Disk) -> None:
    """The message is written, the tombstone of the oldest (max_msgs) does not fit: the
    message is stored, so it is acknowledged; the limit holds again at the next publish."""
    st = stream(tmp_path, max_msgs=3)
    for i in range(3):
        st.publish("s.1", None, b"m%d" % i)
    disk.room = msg_size("s.1", None, b"m3")  # the message, not its predecessor's tombstone
    assert st.publish("s.1", None, b"m3")["seq"] == 4
    assert st.store.count == 4
    disk.room = None
    assert st.publish("s.1", None, b"m4")["seq"] == 5
    assert (st.store.count, st.store.first_seq) == (3, 3)
    st.close()


def test_removals_on_a_full_disk_do_not_fail_the_publish_or_the_ack(
        tmp_path: Path, disk: Disk) -> None:
    """A work queue's acked message, an interest stream's message nobody wants, a
    rollup: their removals do not fit; what was stored is acknowledged, nothing raises."""
    queue = stream(tmp_path, retention="workqueue")
    queue.publish("s.1", None, b"job")
    disk.room = 0
    queue.acked(1)  # the consumer's ack is taken; the message stays while the disk is full
    disk.room = None
    queue.close()
    interest = Stream(normalize({"subjects": ["i"], "storage": "file",
                                 "retention": "interest"}, "I"), str(tmp_path / "I"))
    disk.room = msg_size("i", None, b"nobody")
    assert interest.publish("i", None, b"nobody")["seq"] == 1
    disk.room = None
    interest.close()
    rollup = Stream(normalize({"subjects": ["r.>"], "storage": "file",
                               "allow_rollup_hdrs": True}, "R"), str(tmp_path / "R"))
    rollup.publish("r.1", None, b"old")
    hdrs = b"NATS/1.0\r\nNats-Rollup: sub\r\n\r\n"
    disk.room = msg_size("r.1", hdrs, b"new")
    assert rollup.publish("r.1", hdrs, b"new")["seq"] == 2
    disk.room = None
    rollup.close()


def test_a_stream_reopens_on_a_full_disk(tmp_path: Path) -> None:
    st = stream(tmp_path)
    st.publish("s.1", None, b"kept")
    st.close()
    with file_size_limit(10):  # nothing can be written, not even a configuration
        again = Stream.load(str(tmp_path / "S"))
        assert again is not None
        assert again.store.get(1).data == b"kept"  # type: ignore[union-attr]
        again.close()


def test_a_consumer_state_that_cannot_be_saved_is_kept_for_the_next_save(
        tmp_path: Path) -> None:
    st = stream(tmp_path)
    for i in range(3):
        st.publish("s.1", None, b"m%d" % i)
    consumer = Consumer(st, "D", consumer_config({"durable_name": "D",
                                                   "ack_policy": "explicit"}),
                        lambda *args: None)
    st.consumers["D"] = consumer
    st.save_consumers()
    saved = st.saved_consumers()
    consumer.request("_INBOX.x", b"2")
    consumer.ack(1, b"+ACK")
    with file_size_limit(10):
        st.save_consumers(only_changed=True)  # no room: the old state stays whole
    assert st.saved_consumers() == saved
    assert not list((tmp_path / "S" / "obs").rglob("*.tmp"))
    st.save_consumers(only_changed=True)  # room again: saved
    assert st.saved_consumers()[0]["ack_floor"] == [1, 1]
    st.close()
