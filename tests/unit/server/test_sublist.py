"""The server's subject index: insert, remove, match with wildcards and queue groups, and a
result cache that stays valid across inserts and removes."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.protocol.subjects import subject_matches
from tidings.server.sublist import EMPTY_RESULT, Sublist, Subscription


class Conn(SimpleNamespace):
    """A connection as far as the index cares: a client's, or a route's."""

    __hash__ = object.__hash__
    __eq__ = object.__eq__
    is_relay = False


LOCAL = Conn(is_route=False)


def sub(subject: str, sid: str = "1", queue: str | None = None, client: object = LOCAL) -> (
    Subscription
):
    return Subscription(client, subject.encode(), queue.encode() if queue else None,
                        sid.encode())


def plain_sids(sl: Sublist, subject: str) -> list[bytes]:
    return [s.sid for s in sl.match(subject.encode())[0]]


def group_sids(sl: Sublist, subject: str) -> dict[bytes, set[bytes]]:
    groups = sl.match(subject.encode())[1]
    out: dict[bytes, set[bytes]] = {}
    for g in groups:
        names = {s.queue for s in g}
        assert len(names) == 1, "one group per queue name"
        out[names.pop()] = {s.sid for s in g}  # type: ignore[index]
    return out


def test_literal_insert_match_remove() -> None:
    sl = Sublist()
    a = sub("foo.bar", "1")
    sl.insert(a)
    assert plain_sids(sl, "foo.bar") == [b"1"]
    assert sl.match(b"foo") is EMPTY_RESULT
    assert sl.match(b"foo.bar.baz") is EMPTY_RESULT
    assert sl.count == 1
    assert sl.remove(a)
    assert sl.count == 0
    assert sl.match(b"foo.bar") is EMPTY_RESULT
    assert not sl.remove(a)  # removing twice is harmless


def test_wildcards() -> None:
    sl = Sublist()
    for i, pattern in enumerate(["foo.*", "foo.>", ">", "*", "*.bar", "foo.*.baz", "a.b"]):
        sl.insert(sub(pattern, str(i)))
    assert sorted(plain_sids(sl, "foo.bar")) == [b"0", b"1", b"2", b"4"]
    assert sorted(plain_sids(sl, "foo")) == [b"2", b"3"]
    assert sorted(plain_sids(sl, "foo.x.baz")) == [b"1", b"2", b"5"]
    assert sorted(plain_sids(sl, "a.b")) == [b"2", b"6"]
    assert sorted(plain_sids(sl, "x.y.z")) == [b"2"]


def test_order_is_the_references() -> None:
    """At each level `>`, then what matches under `*`, then down the literal token; at the end
    the literal subscriptions, then the last level's `*`."""
    sl = Sublist()
    for sid, pattern in [("1", "foo.*"), ("2", "foo.bar"), ("3", "foo.>"), ("4", ">"),
                         ("5", "*.bar"), ("6", "*.>")]:
        sl.insert(sub(pattern, sid))
    # The reference delivers foo.bar to > (4), *.> (6), *.bar (5), foo.> (3), foo.bar (2),
    # foo.* (1).
    assert plain_sids(sl, "foo.bar") == [b"4", b"6", b"5", b"3", b"2", b"1"]


def test_subjects_with_empty_tokens_match_nothing() -> None:
    sl = Sublist()
    sl.insert(sub(">", "1"))
    sl.insert(sub("foo.*", "2"))
    for subject in (b"foo..bar", b"foo.", b".foo", b".", b""):
        assert sl.match(subject) is EMPTY_RESULT, subject
    assert plain_sids(sl, "foo.x") == [b"1", b"2"]


def test_queue_groups() -> None:
    sl = Sublist()
    sl.insert(sub("work", "1", "g1"))
    sl.insert(sub("work", "2", "g1"))
    sl.insert(sub("work.*", "3", "g1"))
    sl.insert(sub("work", "4", "g2"))
    sl.insert(sub("work", "5"))
    assert plain_sids(sl, "work") == [b"5"]
    assert group_sids(sl, "work") == {b"g1": {b"1", b"2"}, b"g2": {b"4"}}
    assert group_sids(sl, "work.x") == {b"g1": {b"3"}}


def test_cache_is_kept_valid() -> None:
    sl = Sublist()
    assert sl.match(b"a.b") is EMPTY_RESULT
    assert b"a.b" not in sl.cache  # (asked once: not cached yet)
    assert sl.match(b"a.b") is EMPTY_RESULT
    assert b"a.b" in sl.cache
    literal = sub("a.b", "1")
    sl.insert(literal)
    assert plain_sids(sl, "a.b") == [b"1"]
    star = sub("a.*", "2")
    sl.insert(star)
    assert plain_sids(sl, "a.b") == [b"1", b"2"]
    full = sub(">", "3", "q")
    sl.insert(full)
    assert group_sids(sl, "a.b") == {b"q": {b"3"}}
    sl.remove(star)
    assert plain_sids(sl, "a.b") == [b"1"]
    sl.remove(literal)
    assert plain_sids(sl, "a.b") == []
    sl.remove(full)
    assert sl.match(b"a.b") is EMPTY_RESULT
    # An insert that does not match a cached subject leaves its entry alone and correct.
    sl.insert(sub("x.*", "4"))
    assert sl.match(b"a.b") is EMPTY_RESULT


def test_a_subject_used_once_does_not_crowd_the_cache() -> None:
    """Unique subjects (acks, inboxes) are computed, not cached: a subject used again and
    again stays cached among them."""
    sl = Sublist()
    sl.insert(sub(">", "1"))
    sl.match(b"hot")
    sl.match(b"hot")
    for i in range(10_000):
        assert plain_sids(sl, f"ack.{i}") == [b"1"]
    assert b"hot" in sl.cache and len(sl.cache) == 1


def test_trie_is_pruned() -> None:
    sl = Sublist()
    subs = [sub(p, str(i)) for i, p in enumerate(["a.*.c.>", "a.b.*", "*.*.*"])]
    for s in subs:
        sl.insert(s)
    for s in subs:
        assert sl.remove(s)
    assert sl._root.empty()
    assert sl.count == 0


# -- model-based property test ---------------------------------------------------------------
TOKENS = ["a", "b", "c"]
# A local client and two routes (whose subscriptions are other servers' interest).
CLIENTS = [LOCAL, LOCAL, Conn(is_route=True), Conn(is_route=True)]
patterns = st.lists(st.sampled_from(TOKENS + ["*"]), min_size=1, max_size=3).flatmap(
    lambda toks: st.sampled_from([".".join(toks), ".".join(toks[:-1] + [">"])])
)
literals = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=4).map(".".join)
actions = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), patterns,
                  st.tuples(st.sampled_from([None, "q1", "q2"]), st.sampled_from(CLIENTS))),
        st.tuples(st.just("remove"), st.integers(min_value=0, max_value=50), st.none()),
        st.tuples(st.just("match"), literals, st.none()),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None, database=None)
@given(actions=actions)
def test_matches_a_brute_force_model(actions: list[tuple[str, object, object]]) -> None:
    sl = Sublist()
    live: list[Subscription] = []
    n = 0
    for action, arg, queue in actions:
        if action == "insert":
            n += 1
            queue_name, client = queue  # type: ignore[misc]
            s = sub(str(arg), str(n), queue_name, client)
            sl.insert(s)
            live.append(s)
        elif action == "remove" and live:
            s = live.pop(int(arg) % len(live))  # type: ignore[call-overload]
            assert sl.remove(s)
        elif action == "match":
            subject = str(arg).encode()
            plain, groups, remote = sl.match(subject)
            want = [s for s in live if subject_matches(s.subject, subject)]
            local = [s for s in want if not s.client.is_route]
            assert sorted(s.sid for s in plain) == sorted(s.sid for s in local if not s.queue)
            got_groups = {g[0].queue: sorted(s.sid for s in g) for g in groups}
            want_groups: dict[bytes | None, list[bytes]] = {}
            for s in local:
                if s.queue:
                    want_groups.setdefault(s.queue, []).append(s.sid)
            # Remote interest: one subscription per route with plain interest, and every
            # queue group with a member on a route, with all its members.
            far = [s for s in want if s.client.is_route]
            want_routes = {s.client for s in far if not s.queue}
            want_far_groups = {
                s.queue: sorted(t.sid for t in want if t.queue == s.queue)
                for s in far if s.queue
            }
            for name in want_far_groups:
                want_groups.pop(name, None)
            if remote is None:
                assert not want_routes and not want_far_groups
            else:
                assert [s.client for s in remote.plain] == list(dict.fromkeys(
                    s.client for s in remote.plain))
                assert {s.client for s in remote.plain} == want_routes
                assert all(not s.queue for s in remote.plain)
                got_far = {g[0].queue: sorted(s.sid for s in g) for g in remote.groups}
                assert got_far == want_far_groups
            assert got_groups == {k: sorted(v) for k, v in want_groups.items()}
            if not want:
                assert sl.match(subject) is EMPTY_RESULT
        assert sl.count == len(live)
    # Every cached result is still what a fresh match gives.
    fresh = Sublist()
    for s in live:
        fresh.insert(s)
    for subject, cached in list(sl.cache.items()):
        assert [set(map(id, cached[0])), {frozenset(map(id, g)) for g in cached[1]}] == [
            set(map(id, fresh.match(subject)[0])),
            {frozenset(map(id, g)) for g in fresh.match(subject)[1]},
        ]


def test_a_remote_queue_member_counts_by_its_weight() -> None:
    """A route's queue subscription stands for as many members as the other server has:
    it appears that many times among the group's members, and a new weight is seen at once
    (the cached result is dropped)."""
    sl = Sublist()
    route = Conn(is_route=True)
    local = sub("q.a", "1", "g")
    remote = sub("q.*", "R", "g", client=route)
    remote.weight = 3
    sl.insert(local)
    sl.insert(remote)
    plain, groups, far = sl.match(b"q.a")
    assert groups == () and far is not None
    assert [s.sid for s in far.groups[0]] == [b"1", b"R", b"R", b"R"]
    sl.reweigh(remote, 1)
    assert [s.sid for s in sl.match(b"q.a")[2].groups[0]] == [b"1", b"R"]
