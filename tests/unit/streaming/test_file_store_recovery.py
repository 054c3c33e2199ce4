"""File store recovery: torn tails, CRC failures, lost index files, the lock, kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tidings.streaming.stores import (
    CorruptStoreError,
    StoreLimits,
    StoreLockedError,
    SubRecord,
)
from tidings.streaming.stores.file import FileStore
from tidings.streaming.stores.segments import DAT_MAGIC

REPO = Path(__file__).resolve().parents[3]


def segments(root: Path, channel: str = "foo") -> list[Path]:
    return sorted((root / "channels" / channel).glob("msgs.*.dat"))


def fill(root: Path, n: int, **kw: object) -> None:
    with FileStore(root, **kw) as store:  # type: ignore[arg-type]
        store.store_msgs("foo", [(f"r{i}", b"payload-%d" % i) for i in range(1, n + 1)])
        store.sync()


def datas(store: FileStore, channel: str = "foo") -> list[bytes]:
    return [m.data for m in store.get_msgs(channel, 1, 10_000)]


def test_torn_tail_record_is_truncated_and_the_rest_kept(tmp_path: Path) -> None:
    fill(tmp_path, 10)
    seg = segments(tmp_path)[-1]
    size = seg.stat().st_size
    with open(seg, "r+b") as f:
        f.truncate(size - 3)  # the last record loses its end
    with FileStore(tmp_path) as store:
        assert store.first_last("foo") == (1, 9)
        assert datas(store) == [b"payload-%d" % i for i in range(1, 10)]
        assert store.store_msg("foo", "", b"after") == 10
        store.sync()
    with FileStore(tmp_path) as store:
        assert datas(store)[-2:] == [b"payload-9", b"after"]


def test_torn_record_header_and_zero_fill_are_truncated(tmp_path: Path) -> None:
    fill(tmp_path, 5)
    seg = segments(tmp_path)[-1]
    good = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(b"\x00" * 4096)  # e.g. space allocated but never written before a crash
    with FileStore(tmp_path) as store:
        assert store.first_last("foo") == (1, 5)
    assert seg.stat().st_size == good
    with open(seg, "ab") as f:
        f.write(b"\x07\x00\x00")  # half a record header
    with FileStore(tmp_path) as store:
        assert store.first_last("foo") == (1, 5)
    assert seg.stat().st_size == good


def test_crc_failing_tail_record_is_dropped(tmp_path: Path) -> None:
    fill(tmp_path, 10)
    seg = segments(tmp_path)[-1]
    raw = bytearray(seg.read_bytes())
    raw[-1] ^= 0xFF  # last byte of the last message's payload
    seg.write_bytes(bytes(raw))
    with FileStore(tmp_path) as store:
        assert store.first_last("foo") == (1, 9)
        assert store.lookup("foo", 9).data == b"payload-9"  # type: ignore[union-attr]


def test_corrupt_record_followed_by_valid_ones_is_an_error(tmp_path: Path) -> None:
    fill(tmp_path, 10)
    seg = segments(tmp_path)[-1]
    raw = bytearray(seg.read_bytes())
    pos = raw.index(b"payload-3")
    raw[pos] ^= 0xFF
    seg.write_bytes(bytes(raw))
    with pytest.raises(CorruptStoreError, match="corrupt record at offset"):
        FileStore(tmp_path)
    # The failed open released the directory; an explicit repair keeps what precedes.
    with FileStore(tmp_path, truncate_corrupt=True) as store:
        assert store.first_last("foo") == (1, 2)


def test_lost_or_damaged_index_files_are_rebuilt(tmp_path: Path) -> None:
    fill(tmp_path, 300, segment_bytes=4096)
    segs = segments(tmp_path)
    assert len(segs) >= 3
    segs[0].with_suffix(".idx").unlink()
    idx = segs[1].with_suffix(".idx")
    raw = bytearray(idx.read_bytes())
    raw[20] ^= 0x01
    idx.write_bytes(bytes(raw))
    with FileStore(tmp_path, cache_msgs=1) as store:
        assert store.first_last("foo") == (1, 300)
        assert datas(store) == [b"payload-%d" % i for i in range(1, 301)]
    assert segs[0].with_suffix(".idx").exists()


def test_reads_span_segments_and_dropped_segments_are_deleted(tmp_path: Path) -> None:
    with FileStore(tmp_path, StoreLimits(max_msgs=100), cache_msgs=1) as store:
        for i in range(1, 1001):
            store.store_msg("foo", "", b"%d" % i)
        store.sync()
        assert store.first_last("foo") == (901, 1000)
        assert [m.data for m in store.get_msgs("foo", 890, 30)] == [
            b"%d" % i for i in range(901, 931)
        ]
        # Segments of max_msgs/4 messages: at most 5 are kept for 100 messages.
        assert 4 <= len(segments(tmp_path)) <= 5


def test_a_second_store_cannot_open_the_directory(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    with pytest.raises(StoreLockedError, match=f"in use by another server \\(pid {os.getpid()}\\)"):
        FileStore(tmp_path)
    store.close()
    FileStore(tmp_path).close()


def test_the_lock_holds_against_another_process(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        from tidings.streaming.stores.file import FileStore
        s = FileStore({str(tmp_path)!r})
        print("locked", flush=True)
        sys.stdin.readline()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
        with pytest.raises(StoreLockedError, match=f"pid {proc.pid}"):
            FileStore(tmp_path)
    finally:
        proc.communicate("\n", timeout=30)
    FileStore(tmp_path).close()


def test_torn_subscription_log_tail_keeps_earlier_state(tmp_path: Path) -> None:
    with FileStore(tmp_path) as store:
        sid = store.create_sub("foo", SubRecord(client_id="c", is_durable=True))
        for seq in (1, 2, 3):
            store.add_pending("foo", sid, seq)
        store.ack("foo", sid, 1)
        store.sync()
    log = tmp_path / "channels" / "foo" / "subs.log"
    raw = log.read_bytes()
    log.write_bytes(raw[:-5])  # the ack record is torn
    with FileStore(tmp_path) as store:
        sub = store.sub("foo", sid)
        assert sub is not None and sub.pending == {1, 2, 3} and sub.last_sent == 3


def test_subscription_log_is_compacted(tmp_path: Path) -> None:
    with FileStore(tmp_path) as store:
        sid = store.create_sub("foo", SubRecord(client_id="c", is_durable=True))
        for seq in range(1, 30_001):
            store.add_pending("foo", sid, seq)
            store.ack("foo", sid, seq)
            if seq % 1000 == 0:
                store.flush()
        store.add_pending("foo", sid, 30_001)
        store.sync()
    size = (tmp_path / "channels" / "foo" / "subs.log").stat().st_size
    assert size < 30_000 * 24  # far less than one record per operation
    with FileStore(tmp_path) as store:
        sub = store.sub("foo", sid)
        assert sub is not None and sub.pending == {30_001} and sub.last_sent == 30_001


def test_unrelated_file_in_place_of_a_segment_is_rejected(tmp_path: Path) -> None:
    fill(tmp_path, 3)
    seg = segments(tmp_path)[-1]
    seg.write_bytes(b"NOTOURS!" + seg.read_bytes()[len(DAT_MAGIC) :])
    with pytest.raises(CorruptStoreError, match="not a tidings segment"):
        FileStore(tmp_path)


def test_synced_messages_survive_kill_9(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        from tidings.streaming.stores.file import FileStore
        s = FileStore({str(tmp_path)!r})
        seq = 0
        while True:
            for _ in range(50):
                seq = s.store_msg("foo", "", b"m%d" % (seq + 1))
            s.sync()
            print(seq, flush=True)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        acked = [int(proc.stdout.readline()) for _ in range(20)]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert acked[-1] == 1000
    with FileStore(tmp_path) as store:
        first, last = store.first_last("foo")
        assert first == 1 and last >= acked[-1]
        assert [m.data for m in store.get_msgs("foo", 1, last)] == [
            b"m%d" % i for i in range(1, last + 1)
        ]


@pytest.mark.parametrize(
    ("policy", "first", "second"),
    [("batch", True, True), ("interval", True, False), ("never", False, False)],
)
def test_sync_policies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str, first: bool, second: bool
) -> None:
    from tidings.streaming.stores import file as file_module

    synced: list[int] = []
    monkeypatch.setattr(file_module, "_fsync", synced.append)
    store = FileStore(tmp_path, sync=policy, sync_interval=3600)
    store.store_msg("foo", "", b"1")
    store.sync()
    assert bool(synced) is first
    synced.clear()
    store.store_msg("foo", "", b"2")
    store.sync()
    assert bool(synced) is second
    store.close()
    with FileStore(tmp_path) as reopened:
        assert reopened.first_last("foo") == (1, 2)
