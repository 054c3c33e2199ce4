"""The memory store: sequences, per-subject counts, limits, purge."""

from __future__ import annotations

from tidings.jetstream.memstore import OVERHEAD, MemoryStore


def fill(store: MemoryStore, n: int, subject: str = "a") -> None:
    for i in range(n):
        store.store(subject, None, b"x" * i)


def test_store_numbers_messages_and_counts_bytes() -> None:
    store = MemoryStore()
    one = store.store("a", None, b"hello")
    two = store.store("b", b"NATS/1.0\r\n\r\n", b"")
    assert (one.seq, two.seq) == (1, 2)
    assert store.count == 2 and (store.first_seq, store.last_seq) == (1, 2)
    assert store.bytes == (1 + 5 + OVERHEAD) + (1 + 12 + OVERHEAD)
    assert store.subjects == {"a": 1, "b": 1}
    assert store.last_ts == two.ts
    assert store.get(1) == one and store.get(3) is None


def test_first_seq_given() -> None:
    store = MemoryStore(first_seq=100)
    assert (store.first_seq, store.last_seq, store.count) == (100, 99, 0)
    assert store.store("a", None, b"").seq == 100


def test_remove_advances_first_and_counts() -> None:
    store = MemoryStore()
    fill(store, 5)
    assert store.remove(1) and not store.remove(1) and not store.remove(9)
    assert store.first_seq == 2
    assert store.remove(3)
    assert store.remove(2)
    assert (store.first_seq, store.count, store.subjects) == (4, 2, {"a": 2})
    assert store.bytes == (1 + 3 + OVERHEAD) + (1 + 4 + OVERHEAD)
    store.remove(4)
    store.remove(5)
    assert (store.first_seq, store.last_seq, store.subjects, store.bytes) == (6, 5, {}, 0)


def test_purge_keeps_the_sequence() -> None:
    store = MemoryStore()
    fill(store, 3)
    assert store.purge() == 3
    assert (store.count, store.first_seq, store.last_seq, store.bytes) == (0, 4, 3, 0)
    assert store.store("a", None, b"").seq == 4


def test_limits_max_msgs_and_bytes() -> None:
    store = MemoryStore()
    fill(store, 10)
    store.enforce(4, -1, 0, -1)
    assert (store.count, store.first_seq) == (4, 7)
    size = store.get(10).size  # type: ignore[union-attr]
    store.enforce(-1, size, 0, -1)
    assert (store.count, store.first_seq) == (1, 10)


def test_limit_max_age_removes_the_old_only() -> None:
    store = MemoryStore()
    store.store("a", None, b"", ts=1)
    store.store("a", None, b"", ts=2)
    store.store("a", None, b"")
    store.enforce(-1, -1, 60.0, -1)
    assert (store.count, store.first_seq) == (1, 3)


def test_limit_per_subject_removes_the_oldest_on_that_subject() -> None:
    store = MemoryStore()
    for subject in "abab":
        store.store(subject, None, subject.encode())
    store.store("a", None, b"a")
    store.enforce(-1, -1, 0, 2, "a")
    assert [store.get(s) is not None for s in range(1, 6)] == [False, True, True, True, True]
    assert store.subjects == {"a": 2, "b": 2}
    last = store.last_for("a")
    assert last is not None and last.seq == 5
    assert store.last_for("c") is None
