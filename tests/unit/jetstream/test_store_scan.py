"""`scan`, the column-wise read of a run of stored messages (what a columnar direct get
sends), gives what reading each message with `get` gives, in every store and block state:
plain and compressed blocks, gaps from removed messages, a batch not yet committed, a
subject filter, a byte budget, a range past the ends; and a record that fails its
checksum is left out, as `get` leaves it out."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tidings.jetstream.filestore import MIN_BLOCK, FileStore
from tidings.jetstream.memstore import MemoryStore, Run, StoredMsg

TS = 1_700_000_000_000_000_000
HDR = b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n"


def fill(store: FileStore | MemoryStore, n: int) -> None:
    for i in range(n):
        store.store(f"orders.{i % 3}", HDR if i % 5 == 0 else None, b"payload %d" % i * 20,
                    ts=TS + i)


def by_get(store: FileStore | MemoryStore, start: int, end: int,
           matches: Callable[[str], bool] | None = None) -> list[tuple[object, ...]]:
    out = []
    for seq in range(max(start, store.first_seq), min(end, store.last_seq) + 1):
        msg: StoredMsg | None = store.get(seq)
        if msg is not None and (matches is None or matches(msg.subject)):
            out.append((msg.seq, msg.ts, msg.subject.encode(), msg.headers or b"", msg.data))
    return out


def rows(run: Run) -> list[tuple[object, ...]]:
    return list(zip(*run[:5], strict=True))


def whole(store: FileStore | MemoryStore, start: int, end: int, budget: int,
          matches: Callable[[str], bool] | None = None) -> tuple[list[tuple[object, ...]], int]:
    """Everything from start to end in scans of `budget` bytes; and how many scans."""
    out: list[tuple[object, ...]] = []
    scans = 0
    while start <= end:
        run = store.scan(start, end, budget, matches)
        assert run.size == sum(map(len, run.subjects + run.headers + run.data))
        scans += 1
        out += rows(run)
        if run.next <= start:
            raise AssertionError(f"scan from {start} did not move on")
        start = run.next
        if not run.seqs and start > store.last_seq:
            break
    return out, scans


@pytest.fixture(params=["file", "compressed", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> FileStore | MemoryStore:
    if request.param == "memory":
        mem = MemoryStore()
        fill(mem, 2_000)
        return mem
    fs = FileStore(tmp_path, block_size=MIN_BLOCK, compress=request.param == "compressed")
    fill(fs, 2_000)
    while fs.compress_step():
        pass
    return fs


def test_a_scan_reads_what_get_reads(store: FileStore | MemoryStore) -> None:
    for seq in (3, 4, 500, 501, 502, 1_999):
        store.remove(seq)
    expected = by_get(store, 1, 2_000)
    got, scans = whole(store, 1, 2_000, 4_096)
    assert got == expected
    assert scans > 10  # (the budget cut it into pieces, each going on where one stopped)
    assert whole(store, 1, 2_000, 1 << 30) == (expected, 1)


def test_a_subject_filter_and_bounds(store: FileStore | MemoryStore) -> None:
    def wanted(subject: str) -> bool:
        return subject == "orders.1"

    assert whole(store, 100, 1_200, 2_000, wanted)[0] == by_get(store, 100, 1_200, wanted)
    assert rows(store.scan(1_990, 5_000, 1 << 20)) == by_get(store, 1_990, 2_000)
    assert store.scan(2_001, 3_000, 1 << 20) == Run([], [], [], [], [], 2_001)
    one = store.scan(10, 2_000, 1)
    assert one.seqs == [10] and one.next == 11  # (one message at least)


def test_what_a_batch_holds_before_its_commit_is_read(tmp_path: Path) -> None:
    fs = FileStore(tmp_path, block_size=MIN_BLOCK)
    fill(fs, 100)
    fs.begin()
    for i in range(20):
        fs.store("late", None, b"x%d" % i, ts=TS + 1_000 + i)
    assert whole(fs, 90, 120, 256)[0] == by_get(fs, 90, 120)
    fs.commit()
    assert whole(fs, 1, 120, 1 << 20)[0] == by_get(fs, 1, 120)


def test_a_record_that_fails_its_checksum_is_left_out(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    fs = FileStore(tmp_path, block_size=MIN_BLOCK)
    fill(fs, 50)
    target = fs.get(7)
    assert target is not None
    blk = next(p for p in sorted((tmp_path / "msgs").glob("*.blk")))
    raw = bytearray(blk.read_bytes())
    at = raw.find(target.data)
    raw[at] ^= 0xFF
    with open(blk, "r+b") as f:
        os.pwrite(f.fileno(), bytes(raw), 0)
    for _ in range(2):  # (a record that failed is checked again: it is never marked good)
        caplog.clear()
        got = rows(fs.scan(1, 50, 1 << 20))
        assert [r[0] for r in got] == [n for n in range(1, 51) if n != 7]
        assert got == by_get(fs, 1, 50)
        assert "message 7 fails its checksum" in caplog.text


def test_a_scan_after_a_compaction_reads_the_moved_records(tmp_path: Path) -> None:
    fs = FileStore(tmp_path, block_size=MIN_BLOCK)
    fs.compact_min = 1
    fill(fs, 3_000)
    assert whole(fs, 1, 3_000, 1 << 16)[0] == by_get(fs, 1, 3_000)  # (all marked checked)
    first = tmp_path / "msgs" / "1.blk"
    size = first.stat().st_size
    for seq in range(2, 100):
        fs.remove(seq)
    assert first.stat().st_size < size  # (it was compacted: its records moved)
    assert whole(fs, 1, 3_000, 1 << 16)[0] == by_get(fs, 1, 3_000)
