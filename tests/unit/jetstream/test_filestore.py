"""The file store: MemoryStore's behaviour, kept across a reopen; torn and corrupt records,
purge marks, block files, compaction, a full disk; the same state as MemoryStore for random
operations; the bytes as the reference's file store counts them."""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nats
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.faultydisk import file_size_limit
from tests.harness import start_configured
from tidings.jetstream import compressed
from tidings.jetstream.filestore import (
    EMPTY_RECORD,
    LARGE_BLOCK,
    MEDIUM_BLOCK,
    MIN_BLOCK,
    FileStore,
    block_size_for,
    msg_size,
)
from tidings.jetstream.memstore import MemoryStore

HDR = b"NATS/1.0\r\nX: 1\r\n\r\n"
REPO = Path(__file__).resolve().parents[3]


def blocks(path: Path) -> list[Path]:
    return sorted((path / "msgs").glob("*.blk"), key=lambda p: int(p.stem))


def reopen(store: FileStore, **kw: object) -> FileStore:
    store.close()
    return FileStore(store.dir.parent, block_size=store.block_size, **kw)  # type: ignore[arg-type]


def fill(store: FileStore, n: int, subject: str = "a", size: int = 10) -> None:
    for i in range(n):
        store.store(subject, None, bytes([i % 256]) * size)


def state(store: FileStore | MemoryStore) -> tuple[object, ...]:
    msgs = [store.get(seq) for seq in range(store.first_seq, store.last_seq + 1)]
    return (store.count, store.first_seq, store.last_seq, store.last_ts, dict(store.subjects),
            [m for m in msgs if m is not None])


# -- MemoryStore's behaviour -------------------------------------------------------------
def test_store_get_and_bytes_as_the_reference_counts_them(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    one = store.store("foo", None, b"hello")
    two = store.store("bar.baz", HDR, b"")
    assert (one.seq, two.seq, store.count, store.first_seq, store.last_seq) == (1, 2, 2, 1, 2)
    # fileStoreMsgSize: 22 + subject + payload + 8, and 4 + headers with headers
    assert store.bytes == (22 + 3 + 5 + 8) + (22 + 7 + 4 + len(HDR) + 0 + 8)
    assert store.bytes == msg_size("foo", None, b"hello") + msg_size("bar.baz", HDR, b"")
    assert store.get(1) == one and store.get(2) == two and store.get(3) is None
    assert store.get(0) is None
    assert store.subjects == {"foo": 1, "bar.baz": 1}
    assert store.last_ts == two.ts
    store.close()


def test_remove_and_first_seq(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    fill(store, 5)
    assert store.remove(1) and not store.remove(1) and not store.remove(9)
    assert store.first_seq == 2
    assert store.remove(3) and store.remove(2)
    assert (store.first_seq, store.count, store.subjects) == (4, 2, {"a": 2})
    assert store.bytes == 2 * msg_size("a", None, b"x" * 10)
    assert store.remove(4) and store.remove(5)
    assert (store.first_seq, store.last_seq, store.subjects, store.bytes) == (6, 5, {}, 0)
    assert store.store("a", None, b"").seq == 6
    store.close()


def test_purge_keeps_the_sequence(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    fill(store, 3)
    assert store.purge() == 3
    assert (store.count, store.first_seq, store.last_seq, store.bytes, store.subjects) == (
        0, 4, 3, 0, {})
    assert store.store("b", None, b"").seq == 4
    store.close()


def test_limits(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    fill(store, 10)
    store.enforce(4, -1, 0, -1)
    assert (store.count, store.first_seq) == (4, 7)
    store.enforce(-1, msg_size("a", None, b"x" * 10), 0, -1)
    assert (store.count, store.first_seq) == (1, 10)
    store.purge()
    store.store("a", None, b"", ts=time.time_ns() - 3600 * 10**9)
    store.store("a", None, b"", ts=1)
    store.store("a", None, b"")
    store.enforce(-1, -1, 60.0, -1)
    assert (store.count, store.first_seq) == (1, 13)
    store.close()


def test_limit_per_subject_and_last_for(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for subject in "abab":
        store.store(subject, None, subject.encode())
    store.store("a", None, b"a")
    store.enforce(-1, -1, 0, 2, "a")
    assert [store.get(s) is not None for s in range(1, 6)] == [False, True, True, True, True]
    assert store.subjects == {"a": 2, "b": 2}
    assert store.last_for("a").seq == 5  # type: ignore[union-attr]
    assert store.last_for("b").seq == 4  # type: ignore[union-attr]
    assert store.last_for("c") is None
    store.remove(5)
    assert store.last_for("a").seq == 3  # type: ignore[union-attr]
    store.close()


def test_one_value_per_key_stays_cheap(tmp_path: Path) -> None:
    """Messages per subject 1 (a key-value bucket): each store removes the key's previous one."""
    store = FileStore(tmp_path, block_size=MIN_BLOCK)
    for i in range(3000):
        store.store(f"k.{i % 50}", None, str(i).encode())
        store.enforce(-1, -1, 0, 1, f"k.{i % 50}")
    assert store.count == 50 and store.first_seq == 2951
    assert all(v == 1 for v in store.subjects.values())
    assert store.last_for("k.7").data == b"2957"  # type: ignore[union-attr]
    store = reopen(store)
    assert store.count == 50 and store.last_for("k.7").data == b"2957"  # type: ignore[union-attr]
    store.close()


def test_block_size_as_the_reference_picks_it() -> None:
    assert block_size_for("limits") == LARGE_BLOCK == 8 * 1024 * 1024
    assert block_size_for("interest") == block_size_for("workqueue") == MEDIUM_BLOCK
    assert block_size_for("limits", 1000) == MIN_BLOCK
    assert block_size_for("limits", 1 << 30) == LARGE_BLOCK
    assert block_size_for("limits", 1 << 20) == MEDIUM_BLOCK


# -- across a reopen ---------------------------------------------------------------------
def test_reopen_keeps_everything(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for i in range(20):
        store.store(f"s.{i % 3}", HDR if i % 2 else None, b"p" * i)
    store.remove(1)
    store.remove(7)
    before = (state(store), store.bytes)
    store = reopen(store)
    assert (state(store), store.bytes) == before
    assert store.store("s.0", None, b"").seq == 21
    store.close()


def test_first_seq_kept_without_messages(tmp_path: Path) -> None:
    store = FileStore(tmp_path, first_seq=100)
    assert (store.first_seq, store.last_seq) == (100, 99)
    store = reopen(store)
    assert (store.first_seq, store.last_seq, store.count) == (100, 99, 0)
    assert store.store("a", None, b"").seq == 100
    store.close()


def test_removal_survives_reopen(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    fill(store, 10)
    for seq in (1, 2, 5, 10):
        store.remove(seq)
    store = reopen(store)
    assert [seq for seq in range(1, 11) if store.get(seq)] == [3, 4, 6, 7, 8, 9]
    assert (store.first_seq, store.last_seq, store.count) == (3, 10, 6)
    store.close()


def test_removing_the_last_messages_keeps_the_sequence(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    fill(store, 3)
    for seq in (1, 2, 3):
        store.remove(seq)
    store = reopen(store)
    assert (store.first_seq, store.last_seq, store.count) == (4, 3, 0)
    store.close()


def test_purge_then_reopen_keeps_the_sequence(tmp_path: Path) -> None:
    store = FileStore(tmp_path, block_size=MIN_BLOCK)
    fill(store, 500, size=200)
    last_ts = store.last_ts
    assert len(blocks(tmp_path)) > 1
    store.purge()
    assert len(blocks(tmp_path)) == 1
    store = reopen(store)
    assert (store.count, store.first_seq, store.last_seq, store.last_ts) == (0, 501, 500, last_ts)
    store.store("a", None, b"")
    store = reopen(store)
    assert (store.count, store.first_seq, store.last_seq) == (1, 501, 501)
    store.close()


def test_purge_cut_short_still_holds(tmp_path: Path) -> None:
    """A crash after the purge mark is written but before the old blocks are deleted."""
    store = FileStore(tmp_path, block_size=MIN_BLOCK)
    fill(store, 300, size=200)
    saved = {p.name: p.read_bytes() for p in blocks(tmp_path)}
    store.purge()
    store.close()
    for name, data in saved.items():
        (tmp_path / "msgs" / name).write_bytes(data)
    store = FileStore(tmp_path, block_size=MIN_BLOCK)
    assert (store.count, store.first_seq, store.last_seq) == (0, 301, 300)
    assert len(blocks(tmp_path)) == 1
    store.close()


def test_torn_last_record_is_dropped_on_reopen(tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    store = FileStore(tmp_path)
    fill(store, 10)
    store.close()
    last = blocks(tmp_path)[-1]
    size = last.stat().st_size
    os.truncate(last, size - 5)  # the last record, cut short
    with caplog.at_level(logging.WARNING, logger="tidings.jetstream"):
        store = FileStore(tmp_path)
    assert "torn record" in caplog.text
    assert (store.count, store.first_seq, store.last_seq) == (9, 1, 9)
    assert last.stat().st_size == size - msg_size("a", None, b"x" * 10)
    assert store.store("a", None, b"new").seq == 10
    store = reopen(store)
    assert store.get(10).data == b"new"  # type: ignore[union-attr]
    assert [store.get(s).data for s in range(1, 10)] == [  # type: ignore[union-attr]
        bytes([i]) * 10 for i in range(9)]
    store.close()


def test_torn_header_of_a_record(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = FileStore(tmp_path)
    fill(store, 3)
    store.close()
    with open(blocks(tmp_path)[-1], "ab") as f:
        f.write(b"\x40\x00")  # two bytes of a next record's length
    with caplog.at_level(logging.WARNING, logger="tidings.jetstream"):
        store = FileStore(tmp_path)
    assert "torn record" in caplog.text
    assert (store.count, store.last_seq) == (3, 3)
    store.close()


def test_corrupt_record_in_the_middle_is_skipped(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    store = FileStore(tmp_path)
    fill(store, 5)
    store.close()
    path = blocks(tmp_path)[0]
    data = bytearray(path.read_bytes())
    data[2 * msg_size("a", None, b"x" * 10) + 30] ^= 0xFF  # the payload of message 3
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="tidings.jetstream"):
        store = FileStore(tmp_path)
    assert "fails its checksum" in caplog.text
    assert [s for s in range(1, 6) if store.get(s)] == [1, 2, 4, 5]
    assert (store.count, store.last_seq, store.subjects) == (4, 5, {"a": 4})
    store.close()


# -- blocks ------------------------------------------------------------------------------
def test_large_payloads(tmp_path: Path) -> None:
    store = FileStore(tmp_path, block_size=MIN_BLOCK)
    big = [os.urandom(n) for n in (3 << 20, 100, 1 << 20, MIN_BLOCK)]
    for data in big:
        store.store("big", HDR, data)
    store = reopen(store)
    assert [store.get(s).data for s in range(1, 5)] == big  # type: ignore[union-attr]
    assert store.bytes == sum(msg_size("big", HDR, d) for d in big)
    store.close()


def test_many_blocks(tmp_path: Path) -> None:
    store = FileStore(tmp_path, block_size=MIN_BLOCK)
    fill(store, 3000, size=100)
    per_block = MIN_BLOCK // msg_size("a", None, b"x" * 100)
    files = blocks(tmp_path)
    assert len(files) == -(-3000 // per_block)
    assert all(p.stat().st_size <= MIN_BLOCK for p in files)
    for seq in range(1, per_block + 1):  # the whole first block: its file goes
        store.remove(seq)
    assert blocks(tmp_path) == files[1:]
    store = reopen(store)
    assert (store.count, store.first_seq, store.last_seq) == (3000 - per_block, per_block + 1,
                                                              3000)
    assert store.get(2999).data == bytes([2998 % 256]) * 100  # type: ignore[union-attr]
    store.close()


def test_a_block_mostly_removed_is_compacted(tmp_path: Path) -> None:
    store = FileStore(tmp_path, block_size=MIN_BLOCK)
    store.compact_min = 0
    fill(store, 1000, size=100)
    first = blocks(tmp_path)[0]
    size = first.stat().st_size
    for seq in range(1, 200, 3):
        store.remove(seq)
    for seq in range(2, 200, 3):
        store.remove(seq)
    assert first.exists() and first.stat().st_size < size  # less than before any tombstone
    keep = [s for s in range(1, 1001) if store.get(s)]
    assert keep[:3] == [3, 6, 9]
    before = state(store)
    store = reopen(store)
    assert state(store) == before
    store.close()


def test_many_blocks_reopened_with_interior_removals(tmp_path: Path) -> None:
    store = FileStore(tmp_path, block_size=MIN_BLOCK)
    store.compact_min = 0
    for i in range(2000):
        store.store(f"t.{i % 7}", HDR if i % 5 == 0 else None, os.urandom(i % 300))
    for seq in range(1, 2001, 4):
        store.remove(seq)
    before = (state(store), store.bytes)
    store = reopen(store)
    assert (state(store), store.bytes) == before
    store.close()


# -- durability --------------------------------------------------------------------------
def test_sync_and_sync_always(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "a")
    fill(store, 3)
    store.sync()
    store.sync()
    store.close()
    store = FileStore(tmp_path / "b", sync_always=True)
    fill(store, 3)
    store.remove(2)
    store.purge()
    store = reopen(store, sync_always=True)
    assert (store.count, store.last_seq) == (0, 3)
    store.close()


def test_a_failed_write_stores_nothing(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    fill(store, 3)
    size = blocks(tmp_path)[0].stat().st_size
    with file_size_limit(size + 20), pytest.raises(OSError):
        store.store("a", None, b"y" * 100)  # the first 20 bytes reach the file
    assert (store.count, store.last_seq, blocks(tmp_path)[0].stat().st_size) == (3, 3, size)
    with file_size_limit(size + 10), pytest.raises(OSError):
        store.remove(2)
    assert store.get(2) is not None and store.count == 3
    files = blocks(tmp_path)
    with file_size_limit(10), pytest.raises(OSError):
        store.purge()  # its mark cannot be written: nothing is purged
    assert (blocks(tmp_path), store.count, store.get(1) is not None) == (files, 3, True)
    assert store.store("a", None, b"z").seq == 4
    store = reopen(store)
    assert (store.count, store.last_seq, store.get(4).data) == (4, 4, b"z")  # type: ignore
    store.close()


def test_acknowledged_messages_survive_kill_9(tmp_path: Path) -> None:
    writer = textwrap.dedent(f"""
        import sys
        from tidings.jetstream.filestore import FileStore
        store = FileStore({str(tmp_path)!r}, block_size=40000)
        i = 0
        while True:
            i += 1
            seq = store.store("k." + str(i % 10), None, b"v" * (i % 500)).seq
            if i % 3 == 0:
                store.remove(seq - 1)
            sys.stdout.write(f"{{seq}}\\n")
            sys.stdout.flush()
    """)
    proc = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, cwd=REPO)
    assert proc.stdout is not None
    acked = [int(proc.stdout.readline()) for _ in range(3000)]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = FileStore(tmp_path, block_size=40000)
    for seq in acked[:-1]:
        assert (store.get(seq) is None) == (seq % 3 == 2), seq
    assert store.last_seq >= acked[-1]
    store.close()


# -- the same as MemoryStore -------------------------------------------------------------
OLD_TS = 1_000_000_000
SUBJECTS = ["a", "b.c", "d"]
OPS = [  # (weight, strategy)
    (50, st.tuples(st.just("store"), st.sampled_from(SUBJECTS), st.booleans(),
                   st.binary(max_size=300), st.booleans())),
    (25, st.tuples(st.just("remove"), st.integers(0, 100))),
    (12, st.tuples(st.just("enforce"), st.sampled_from([-1, 3, 10]), st.sampled_from([0, 60.0]),
                   st.sampled_from([-1, 1, 2]), st.sampled_from(SUBJECTS))),
    (8, st.tuples(st.just("reopen"))),
    (5, st.tuples(st.just("purge"))),
    (15, st.tuples(st.just("compress"), st.integers(1, 20))),  # steps (with compression on)
]


def _pick(r: int) -> st.SearchStrategy[tuple]:
    for weight, strategy in OPS:
        if r < weight:
            return strategy
        r -= weight
    raise AssertionError(r)


op = st.integers(0, sum(weight for weight, _ in OPS) - 1).flatmap(_pick)


@settings(max_examples=150, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=20, max_size=150), first_seq=st.sampled_from([1, 7]))
@pytest.mark.parametrize("compress", [False, True])
def test_same_state_as_the_memory_store(tmp_path_factory: pytest.TempPathFactory,
                                        monkeypatch: pytest.MonkeyPatch,
                                        ops: list[tuple], first_seq: int,
                                        compress: bool) -> None:
    """Also with compressed blocks (chunks of 128 bytes: records span them) compressed a
    step at a time between the other operations."""
    monkeypatch.setattr(compressed, "CHUNK", 128)
    path = tmp_path_factory.mktemp("fs")
    mem = MemoryStore(first_seq)
    fs = FileStore(path, first_seq, block_size=600, compress=compress)
    fs.compact_min = 0
    for i, (kind, *args) in enumerate(ops):
        if kind == "store":
            subject, with_hdr, data, old = args
            ts = OLD_TS + i if old else time.time_ns()
            for store in (mem, fs):
                store.store(subject, HDR if with_hdr else None, data, ts=ts)
        elif kind == "remove":
            assert mem.remove(args[0]) == fs.remove(args[0])
        elif kind == "purge":
            assert mem.purge() == fs.purge()
        elif kind == "enforce":
            for store in (mem, fs):
                store.enforce(args[0], -1, args[1], args[2], args[3])
        elif kind == "compress":
            for _ in range(args[0]):
                fs.compress_step()
        else:
            fs = reopen(fs, compress=compress)
            fs.compact_min = 0
        assert state(fs) == state(mem)
        assert fs.bytes == sum(msg_size(m.subject, m.headers, m.data) for m in mem.msgs.values())
        for subject in SUBJECTS:
            assert fs.last_for(subject) == mem.last_for(subject)
        for seq in (fs.first_seq - 1, fs.first_seq + 1, (fs.first_seq + fs.last_seq) // 2,
                    fs.last_seq, fs.last_seq + 1):
            assert fs.count_from(seq) == mem.count_from(seq)
        stamps = [m.ts for _, m in sorted(mem.msgs.items())]
        if stamps and stamps == sorted(stamps):  # (first_at: a binary search, times in order)
            for ns in set(stamps) | {OLD_TS - 1, time.time_ns() + 1}:
                assert fs.first_at(ns) == mem.first_at(ns)
    fs.close()


def test_empty_record_length_is_the_references() -> None:
    assert EMPTY_RECORD == 30  # emptyRecordLen = msgHdrSize (22) + checksumSize (8)


# -- the reference's bytes ---------------------------------------------------------------
async def test_bytes_as_the_reference_file_stream_reports(tmp_path: Path) -> None:
    """The same messages in a reference `storage: file` stream and in a FileStore: the same
    bytes, also after a removal and a purge."""
    server = start_configured("reference", f"jetstream {{ store_dir: {str(tmp_path / 'ref')!r} }}\n")
    nc = await nats.connect(f"nats://127.0.0.1:{server.port}")
    try:
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s.>"], storage="file")
        sent = [("s.a", None, b""), ("s.bb", {"X": "1"}, b"hello"),
                ("s.c.d", {"Nats-Msg-Id": "m1", "Y": "two"}, os.urandom(3000)),
                ("s.a", None, os.urandom(70000))]
        for subject, headers, data in sent:
            await js.publish(subject, data, headers=headers)
        store = FileStore(tmp_path / "ours")
        for seq in range(1, len(sent) + 1):
            reply = await nc.request("$JS.API.STREAM.MSG.GET.S", json.dumps({"seq": seq}).encode())
            msg = json.loads(reply.data)["message"]
            hdrs = base64.b64decode(msg["hdrs"]) if "hdrs" in msg else None
            store.store(msg["subject"], hdrs, base64.b64decode(msg.get("data", "")))

        async def reference_state() -> tuple[int, int, int, int]:
            st = (await js.stream_info("S")).state
            return st.bytes, st.messages, st.first_seq, st.last_seq

        assert await reference_state() == (store.bytes, 4, 1, 4)
        await js.delete_msg("S", 3)
        store.remove(3)
        assert await reference_state() == (store.bytes, 3, 1, 4)
        await js.purge_stream("S")
        store.purge()
        assert await reference_state() == (store.bytes, 0, store.first_seq, store.last_seq) == (
            0, 0, 5, 4)
        store.close()
    finally:
        await nc.close()
        server.stop()
