"""The memory store's message log: records across chunk boundaries, and kept out of the
garbage collector's sight.

A full collection walks every tracked object: with each stored message tracked, its pause
grew with the store (0.1 s at 450,000 messages) and stopped the whole server meanwhile.
"""

from __future__ import annotations

import gc

from tidings.streaming.stores.base import MsgRecord
from tidings.streaming.stores.memory import CHUNK, MemoryMsgLog, MemoryStore


def test_stored_messages_are_not_tracked_by_the_garbage_collector() -> None:
    store = MemoryStore()
    store.store_msgs("warm", [("", b"x")])
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(10):
        store.store_msgs("foo", [("", b"x" * 16)] * 1000)
    gc.collect()
    grown = len(gc.get_objects()) - before
    assert grown < 1000, f"{grown} more objects tracked after storing 10,000 messages"
    # and they read back as records
    msgs = store.get_msgs("foo", 1, 3)
    assert [(m.seq, m.data) for m in msgs] == [(1, b"x" * 16), (2, b"x" * 16), (3, b"x" * 16)]
    store.close()


def test_records_across_chunks_and_drops() -> None:
    log = MemoryMsgLog()
    n = 2 * CHUNK + 1808
    log.append([MsgRecord(seq, seq * 10, "c", "", b"%d" % seq) for seq in range(1, 1001)])
    for seq in range(1001, n + 1):
        log.append_one(MsgRecord(seq, seq * 10, "c", "", b"%d" % seq))
    assert log.count == n
    assert [m.seq for m in log.get_range(CHUNK - 5, 10)] == list(range(CHUNK - 5, CHUNK + 5))
    assert log.get(2 * CHUNK + 1).data == b"%d" % (2 * CHUNK + 1)
    assert [m.seq for m in log.get_range(n - 1, 10)] == [n - 1, n]
    assert log.find_timestamp(41_000) == 4100
    assert log.find_timestamp(41_001) == 4101
    assert log.find_timestamp(0) == 1
    assert log.find_timestamp(10**9) == n + 1
    before = log.nbytes
    log.drop_first(5000)
    assert log.first_seq == 5001 and log.count == n - 5000
    assert before - log.nbytes == sum(len(b"%d" % seq) for seq in range(1, 5001))
    assert log.first_timestamp() == 50_010
    assert log.find_timestamp(10) == 5001
    assert [m.seq for m in log.get_range(5001, 3)] == [5001, 5002, 5003]
    assert [m.seq for m in log.get_range(2 * CHUNK - 1, 3)] == [2 * CHUNK - 1 + i for i in range(3)]
    log.drop_first(n)  # more than held: everything
    assert log.count == 0 and log.nbytes == 0
