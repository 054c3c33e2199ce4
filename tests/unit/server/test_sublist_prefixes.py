"""Results kept by prefix: a subject used once (a reply `<inbox>.<n>`) is matched from what
the trie gave its prefix, exactly as a fresh index would match it; only what a `*` took is
kept."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.server.test_sublist import LOCAL, Conn, sub
from tidings.server.sublist import Sublist, Subscription

# -- results kept by prefix ------------------------------------------------------------------
RELAY = Conn(is_route=False, is_relay=True)
ROUTE = Conn(is_route=True)
LAST = ["a", "b", "n1", "n2", "n3"]  # last tokens: some a wildcard's, others (numbers) not
shared = st.lists(st.sampled_from(["a", "b", "*"]), min_size=1, max_size=2).flatmap(
    lambda toks: st.sampled_from([
        ".".join(toks + ["*"]), ".".join(toks + [">"]), ".".join(toks + ["a"]),
        ".".join(toks), ".".join(toks + ["n2"]),
    ]))
changes = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), shared,
                  st.tuples(st.sampled_from([None, "q"]),
                            st.sampled_from([LOCAL, RELAY, ROUTE]),
                            st.booleans())),
        st.tuples(st.just("remove"), st.integers(min_value=0, max_value=40), st.none()),
        st.tuples(st.just("reweigh"), st.integers(min_value=0, max_value=40), st.none()),
    ),
    max_size=30,
)


def _shape(result: tuple[object, object, object]) -> object:
    """A result as sids, in its order."""
    plain, groups, remote = result
    far = None if remote is None else (
        [s.sid for s in remote.plain], [[s.sid for s in g] for g in remote.groups],
        [s.sid for s in remote.relays])
    return [s.sid for s in plain], [[s.sid for s in g] for g in groups], far


def _refuses_x(subject: bytes, queue: bytes | None) -> bool:
    return not subject.endswith(b"n3")


@settings(max_examples=300, deadline=None, database=None)
@given(changes=changes)
def test_a_subject_used_once_gets_what_a_fresh_index_gives(
        changes: list[tuple[str, object, object]]) -> None:
    """Subjects that differ in their last token only (replies `<inbox>.<n>`, computed once
    each, never cached) get exactly, in order, what an index built afresh with the same
    subscriptions gives: also after wildcard and literal subscriptions to such a subject
    come and go, a remote member is reweighed, and with guarded subscriptions."""
    sl = Sublist()
    live: list[Subscription] = []
    subjects = [f"{p}.{t}".encode() for p in ("a", "a.b", "b.a", "a.a") for t in LAST]
    for n, (action, arg, extra) in enumerate(changes):
        if action == "insert":
            queue, client, guarded = extra  # type: ignore[misc]
            s = sub(str(arg), str(n), queue, client)
            if guarded:
                s.guard = _refuses_x
            sl.insert(s)
            live.append(s)
        elif action == "remove" and live:
            assert sl.remove(live.pop(int(arg) % len(live)))  # type: ignore[call-overload]
        elif action == "reweigh" and live:
            sl.reweigh(live[int(arg) % len(live)], int(arg) % 3 + 1)  # type: ignore[call-overload]
        fresh = Sublist()
        for s in live:
            fresh.insert(s)
        for subject in subjects:
            sl._seen.clear()  # (each time as a subject used once: never from the cache)
            fresh._drop_prefixes()  # (the fresh index walks its trie each time)
            assert _shape(sl.compute(subject)) == _shape(fresh.compute(subject)), subject


def test_a_reply_subject_is_matched_by_its_prefix() -> None:
    """`<inbox>.<n>` for many n: after the first, each is matched from the result kept by
    `<inbox>` (no walk of the trie), and a literal subscription to one of them, or a wildcard
    ending in its last token, is still seen."""
    sl = Sublist()
    inbox = sub("_INBOX.abc.*", "1")
    sl.insert(inbox)
    sl.insert(sub("$JS.API.>", "2", client=RELAY))
    sl.insert(sub("_INBOX.*.4", "4"))
    assert sl.compute(b"_INBOX.abc.1")[0] == (inbox,)
    assert b"_INBOX.abc" in sl._prefixes
    assert [s.sid for s in sl.compute(b"_INBOX.abc.2")[0]] == [b"1"]
    assert [s.sid for s in sl.compute(b"_INBOX.abc.4")[0]] == [b"4", b"1"]
    sl.insert(sub("_INBOX.abc.3", "3"))
    assert b"_INBOX.abc" in sl._prefixes  # (a literal subscription keeps what was kept)
    assert [s.sid for s in sl.compute(b"_INBOX.abc.3")[0]] == [b"3", b"1"]
    assert [s.sid for s in sl.compute(b"_INBOX.abc.5")[0]] == [b"1"]


def test_only_what_a_star_took_is_kept_by_prefix() -> None:
    """Acks (`$JS.ACK.<stream>.<consumer>...`, taken by `$JS.ACK.>`) differ in every token:
    nothing is kept for them."""
    sl = Sublist()
    sl.insert(sub("$JS.ACK.>", "1", client=RELAY))
    for i in range(10):
        assert sl.compute(b"$JS.ACK.S.C.1.%d.%d.123.0" % (i, i))[2] is not None
    assert not sl._prefixes
