"""The file store with `compression: s2`: sealed blocks rewritten compressed, a chunk a step;
what they hold read back, removed from, compacted and reopened; the files decode as an s2
stream to the plain block; a chunk torn by a crash is cut off; a chunk that does not decode
loses only its block's records from it on."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tidings.jetstream import compressed
from tidings.jetstream.archive import S2Reader
from tidings.jetstream.filestore import FileStore

TS = 1_700_000_000_000_000_000


def blocks(path: Path) -> list[Path]:
    return sorted((path / "msgs").glob("*.blk"), key=lambda p: int(p.stem))


def fill(store: FileStore, n: int) -> None:
    for i in range(n):
        store.store(f"kv.key{i % 50}", b"NATS/1.0\r\nKV-Operation: PUT\r\n\r\n" if i % 3 else None,
                    b'{"user": %d, "name": "somebody", "active": true}' % i, ts=TS + i)


def compress_all(store: FileStore) -> int:
    steps = 0
    while store.compress_step():
        steps += 1
    return steps


def all_msgs(store: FileStore) -> list[object]:
    return [store.get(seq) for seq in range(store.first_seq, store.last_seq + 1)]


def test_sealed_blocks_are_compressed_and_read_back(tmp_path: Path) -> None:
    plain = FileStore(tmp_path / "plain", block_size=64 * 1024)
    packed = FileStore(tmp_path / "packed", block_size=64 * 1024, compress=True)
    for store in (plain, packed):
        fill(store, 5000)
    assert compress_all(plain) == 0
    assert compress_all(packed) > 0
    sealed = blocks(tmp_path / "packed")[:-1]
    assert len(sealed) >= 4
    for path, twin in zip(sealed, blocks(tmp_path / "plain"), strict=False):
        raw = path.read_bytes()
        assert compressed.is_compressed(raw)
        assert len(raw) < twin.stat().st_size / 3
        reader = S2Reader()  # an s2 stream reader decodes the plain block
        assert b"".join(reader.feed(raw)) == twin.read_bytes()
        reader.end()
    assert not compressed.is_compressed(blocks(tmp_path / "packed")[-1].read_bytes())
    assert all_msgs(packed) == all_msgs(plain)
    assert (packed.bytes, packed.count) == (plain.bytes, plain.count)
    packed.close()
    packed = FileStore(tmp_path / "packed", block_size=64 * 1024, compress=True)
    assert all_msgs(packed) == all_msgs(plain)
    assert compress_all(packed) == 0  # (nothing left to compress)
    packed.close()
    plain.close()


def test_removals_from_compressed_blocks_survive_a_reopen(tmp_path: Path) -> None:
    store = FileStore(tmp_path, block_size=32 * 1024, compress=True)
    fill(store, 3000)
    compress_all(store)
    removed = list(range(5, 3000, 7))
    for seq in removed:
        assert store.remove(seq)
    expected = all_msgs(store)
    count = store.count
    store.close()
    store = FileStore(tmp_path, block_size=32 * 1024, compress=True)
    assert store.count == count
    assert all_msgs(store) == expected
    assert store.get(5) is None and store.get(6) is not None
    store.close()


def test_a_compressed_block_mostly_removed_is_compacted_and_compressed_again(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path, block_size=32 * 1024, compress=True)
    store.compact_min = 0
    fill(store, 2000)
    compress_all(store)
    first = blocks(tmp_path)[0]
    size = first.stat().st_size
    last_in_first = max(seq for seq in range(1, 2001)
                        if store._locate(seq) and store._locate(seq)[0].index == 1)
    for seq in range(2, last_in_first, 2):
        store.remove(seq)
    assert not compressed.is_compressed(first.read_bytes())  # rewritten plain
    compress_all(store)
    assert compressed.is_compressed(first.read_bytes())
    assert first.stat().st_size < size
    expected = all_msgs(store)
    store.close()
    store = FileStore(tmp_path, block_size=32 * 1024, compress=True)
    assert all_msgs(store) == expected
    store.close()


def test_writes_while_a_block_is_being_compressed(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Removals from the block being compressed, and new blocks, between its steps."""
    monkeypatch.setattr(compressed, "CHUNK", 1024)
    store = FileStore(tmp_path, block_size=16 * 1024, compress=True)
    fill(store, 400)
    seq = 1
    while store.compress_step():
        store.remove(seq)
        store.store("kv.new", None, b"x" * 40, ts=TS)
        seq += 3
    expected = all_msgs(store)
    assert sum(compressed.is_compressed(p.read_bytes()) for p in blocks(tmp_path)) >= 3
    store.close()
    store = FileStore(tmp_path, block_size=16 * 1024, compress=True)
    assert all_msgs(store) == expected
    store.close()


def test_compression_switched_on_and_off(tmp_path: Path) -> None:
    store = FileStore(tmp_path, block_size=16 * 1024)
    fill(store, 1000)
    assert compress_all(store) == 0
    store.set_compress(True)  # (a stream updated to s2: blocks sealed before, too)
    assert compress_all(store) > 0
    assert all(compressed.is_compressed(p.read_bytes()) for p in blocks(tmp_path)[:-1])
    expected = all_msgs(store)
    store.set_compress(False)  # compressed blocks stay readable
    fill(store, 1000)
    assert compress_all(store) == 0
    store.close()
    store = FileStore(tmp_path, block_size=16 * 1024)
    assert all_msgs(store)[:len(expected)] == expected
    store.close()


def test_a_torn_chunk_at_the_end_is_cut_off(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    store = FileStore(tmp_path, block_size=16 * 1024, compress=True)
    fill(store, 1000)
    compress_all(store)
    store.remove(3)
    expected = all_msgs(store)
    store.close()
    first = blocks(tmp_path)[0]
    good = first.stat().st_size
    with first.open("ab") as f:  # a crash in the middle of appending a tombstone's chunk
        f.write(compressed.chunk(bytes(range(60)))[:20])
    caplog.set_level(logging.WARNING, "tidings.jetstream")
    store = FileStore(tmp_path, block_size=16 * 1024, compress=True)
    assert "torn record" in caplog.text
    assert first.stat().st_size == good
    assert all_msgs(store) == expected
    store.remove(4)  # (appends after the cut)
    store.close()
    store = FileStore(tmp_path, block_size=16 * 1024, compress=True)
    assert store.get(4) is None and store.get(5) == expected[4]
    store.close()


def test_a_chunk_that_does_not_decode(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = FileStore(tmp_path, block_size=256 * 1024, compress=True)
    fill(store, 6000)
    compress_all(store)
    store.close()
    first = blocks(tmp_path)[0]
    raw = bytearray(first.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # a chunk in the middle
    first.write_bytes(raw)
    caplog.set_level(logging.ERROR, "tidings.jetstream")
    store = FileStore(tmp_path, block_size=256 * 1024, compress=True)
    assert "does not decode" in caplog.text
    assert store.get(1) is not None  # what comes before it is read
    assert store.get(store.last_seq) is not None  # and the other blocks
    store.close()
