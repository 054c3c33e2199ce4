"""The memory store keeps its messages out of the garbage collector's sight.

A full collection walks every tracked object: with each stored message tracked, its pause
grew with the store (0.1 s at 450,000 messages) and stopped the whole server meanwhile.
"""

from __future__ import annotations

import gc

from tidings.streaming.stores.memory import MemoryStore


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
