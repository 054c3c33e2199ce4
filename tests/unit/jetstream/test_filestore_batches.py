"""The file store's group commit: between begin() and commit() the last block's records wait
in memory (read back from there), go with one write (and one fsync with sync_always), and
a write that fails takes the batch back as if each publish had been refused."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faultydisk import Disk
from tidings.jetstream.filestore import CommitFailed, FileStore


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    faulty = Disk(tmp_path, monkeypatch)
    monkeypatch.setattr(os, "fsync", faulty.fdatasync)
    yield faulty


def test_a_batch_is_one_write_and_is_read_before_it(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path, sync_always=True)
    store.store("a", None, b"first")  # (the block, written at once)
    writes: list[int] = []
    fsyncs: list[int] = []
    real_write, real_fsync = os.write, os.fsync
    monkeypatch.setattr(os, "write", lambda fd, b: writes.append(len(b)) or real_write(fd, b))
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd) or real_fsync(fd))
    store.begin()
    for i in range(50):
        store.store("a" if i % 2 else "b", None, b"m%d" % i)
    store.remove(3)  # a tombstone of a message still in the batch
    assert writes == [] and fsyncs == []
    got = store.get(40)
    assert got is not None and got.data == b"m38"
    assert store.last_for("b") is not None
    store.commit()
    assert len(writes) == 1 and len(fsyncs) == 1
    store.close()
    again = FileStore(tmp_path)
    assert (again.count, again.last_seq) == (50, 51)
    assert again.get(3) is None
    got = again.get(51)
    assert got is not None and got.data == b"m49"
    again.close()


def test_a_failed_batch_is_taken_back(tmp_path: Path, disk: Disk) -> None:
    store = FileStore(tmp_path)
    store.store("a", None, b"kept")
    before = (store.count, store.bytes, store.last_seq, dict(store.subjects))
    store.begin()
    for i in range(5):
        store.store("b", None, b"lost %d" % i)
    disk.room = 10
    with pytest.raises(CommitFailed) as failed:
        store.commit()
    assert failed.value.lost == [2, 3, 4, 5, 6]
    assert (store.count, store.bytes, store.last_seq, dict(store.subjects)) == before
    assert store.get(2) is None
    disk.room = None
    later = store.store("c", None, b"after")
    assert later.seq == 2  # the sequence goes on where the refused batch began
    store.close()
    again = FileStore(tmp_path)
    assert (again.count, again.last_seq) == (2, 2)
    got = again.get(2)
    assert got is not None and (got.subject, got.data) == ("c", b"after")
    again.close()


def test_after_a_failed_write_the_rest_of_the_batch_is_refused(tmp_path: Path,
                                                               disk: Disk) -> None:
    store = FileStore(tmp_path, block_size=64 * 1024)
    store.store("a", None, b"x")
    store.begin()
    for _ in range(60):  # past a block's end: the batch is written as a new block starts
        store.store("a", None, b"y" * 1000)
        if store.last_seq > 40:
            disk.room = 0
            break
    with pytest.raises(OSError):
        for _ in range(40):
            store.store("a", None, b"z" * 1000)
    with pytest.raises(CommitFailed):
        store.commit()
    disk.room = None
    kept = store.last_seq
    assert store.store("a", None, b"again").seq == kept + 1
    store.close()
