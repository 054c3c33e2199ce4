"""Subject mappings, tidings and the reference nats-server on the same configuration file:
the subjects a subscriber sees for the same publishes, compared. Plain, wildcard and function
destinations (partition numbers included), PUB and HPUB; an account's mappings and the
global account's; weighted destinations, checked by counts over 10,000 messages with bounds
no fair draw can miss; publish permissions checked on the mapped subject; a reload; a
cluster (a message is mapped where a client published it, not again where a route brought
it); a service import's request mapped in the exporting account; an account JWT's
mappings."""

from __future__ import annotations

import asyncio
import re
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.msg import Msg

from tests.harness import Server, start_configured
from tests.harness.jwts import (
    Key,
    account_jwt,
    operator_config,
    operator_jwt,
    user_jwt,
    write_creds,
)
from tests.harness.rawnats import RawConn, Timeout
from tests.harness.waits import wait_until

pytestmark = pytest.mark.timeout(120)

KINDS = ["tidings", "reference"]


def connect(port: int, user: str = "") -> RawConn:
    conn = RawConn(port)
    auth = f',"user":"{user}","pass":"{user}"' if user else ""
    conn.connect(b'CONNECT {"verbose":false,"pedantic":false,"headers":true%b}\r\n'
                 % auth.encode())
    return conn


def subjects(data: bytes) -> list[bytes]:
    """The subjects of the MSG and HMSG frames in `data`, in order."""
    out, pos = [], 0
    while pos < len(data):
        eol = data.index(b"\r\n", pos)
        head = data[pos:eol].split()
        pos = eol + 2
        if head and head[0] in (b"MSG", b"HMSG"):
            out.append(head[1])
            pos += int(head[-1]) + 2
    return out


def pubs(*subjects: str, headers: bool = False) -> bytes:
    if headers:
        hdr = b"NATS/1.0\r\nX: 1\r\n\r\n"
        return b"".join(b"HPUB %s %d %d\r\n%s\r\n" % (s.encode(), len(hdr), len(hdr), hdr)
                        for s in subjects)
    return b"".join(b"PUB %s 0\r\n\r\n" % s.encode() for s in subjects)


def seen(port: int, data: bytes, user: str = "", sub_user: str = "") -> list[bytes]:
    """What a subscriber on `>` (of `sub_user`) receives when a client (of `user`) sends
    `data`."""
    with connect(port, sub_user) as sub, connect(port, user) as pub:
        sub.send(b"SUB > 1\r\n")
        assert sub.barrier() == b""
        pub.send(data)
        assert pub.barrier() == b""
        return subjects(sub.barrier())


def both(conf: str, play: Callable[[Server], Any]) -> dict[str, Any]:
    """play(server) on tidings and on the reference, each on `conf`."""
    out = {}
    for kind in KINDS:
        server = start_configured(kind, conf, streaming=False)
        try:
            out[kind] = play(server)
        finally:
            server.stop()
    return out


FORMS = """
mappings {
  foo: bar
  "a.*.b": "b.$1.a"
  "c.>": "d.>"
  "e.*.*": "e.{{wildcard(2)}}.{{ Wildcard(1) }}"
  "f.*": "f.{{splitfromleft(1,2)}}.{{SplitFromRight(1,2)}}.{{slicefromleft(1,2)}}.{{sliceFromRight(1,3)}}.{{split(1,-)}}.{{left(1,2)}}.{{right(1,2)}}"
  "g.*.>": "g.{{partition(6,1)}}.>"
  "z.*": "$0.z.$1"
}
"""
FORM_SUBJECTS = ("foo", "a.x.b", "a.x.c", "c.1.2.3", "e.1.2", "f.abcde-fg", "f.--x-y-", "f.a",
                 "f.ab", "g.k.l.m", "z.q", "other", "foo.bar")


def test_destinations_of_every_form_are_the_references() -> None:
    def play(server: Server) -> tuple[list[bytes], list[bytes]]:
        return (seen(server.port, pubs(*FORM_SUBJECTS)),
                seen(server.port, pubs(*FORM_SUBJECTS, headers=True)))

    got = both(FORMS, play)
    assert got["tidings"] == got["reference"]
    plain, with_headers = got["reference"]
    assert plain == with_headers
    assert plain[:4] == [b"bar", b"b.x.a", b"a.x.c", b"d.1.2.3"]


PARTITIONS = """
mappings {
  "p.*.*": "p.{{partition(7,1,2)}}.$1.$2"
  "q.*": "q.{{partition(5)}}.$1"
  "r.*.*": "r.{{partition(1000,2)}}"
}
"""


def test_partitions_are_the_references() -> None:
    """FNV-1a 32 of the named tokens (or of the whole subject), modulo the partitions: the
    reference's numbers for the same subjects."""
    published = ([f"p.{i}.k{i * 7 % 13}" for i in range(100)]
                 + [f"q.{w}" for w in ("a", "bb", "order-1", "order-2", "été", "0")]
                 + [f"r.x.{i}" for i in range(50)])
    got = both(PARTITIONS, lambda server: seen(server.port, pubs(*published)))
    assert got["tidings"] == got["reference"]
    assert len(got["reference"]) == len(published)
    assert len({s.split(b".")[1] for s in got["reference"] if s.startswith(b"p.")}) > 1


def test_a_literal_sources_partition_is_the_references() -> None:
    """The reference hashes no token for a literal source it tries first (always, when it
    is the only mapping): the partition of the empty string. (With other mappings before
    it, in Go's random order, it hashes the subject: no fixed answer to compare.)"""
    got = both('mappings { s: "s.{{partition(10)}}" }',
               lambda server: seen(server.port, pubs("s", "s")))
    assert got["tidings"] == got["reference"] == [b"s.1", b"s.1"]


ACCOUNTS = """
accounts {
  A: { users: [{user: a, password: a}], mappings { foo: bar, "x.*": "y.$1" } }
  B: { users: [{user: b, password: b}] }
}
"""


def test_an_accounts_mappings_are_its_own() -> None:
    def play(server: Server) -> tuple[list[bytes], list[bytes]]:
        data = pubs("foo", "x.1", "z")
        return (seen(server.port, data, "a", "a"), seen(server.port, data, "b", "b"))

    got = both(ACCOUNTS, play)
    assert got["tidings"] == got["reference"] == ([b"bar", b"y.1", b"z"], [b"foo", b"x.1", b"z"])


WEIGHTED = """
mappings {
  w: [{destination: w.a, weight: 50%}, {destination: w.b, weight: 50}]
  r: [{destination: r.x, weight: 30}]
  l: [{destination: l, weight: "50%"}]
}
"""
N = 10_000


@pytest.mark.parametrize("kind", KINDS)
def test_weighted_destinations_take_their_share(kind: str) -> None:
    """Each destination takes its percentage; what the weights leave keeps the subject;
    a source among its own destinations loses the rest. Bounds of 10 points around each
    share: 20 standard deviations of 10,000 fair draws."""
    server = start_configured(kind, WEIGHTED, streaming=False)
    try:
        counts = Counter(seen(server.port, pubs(*["w", "r", "l"] * N)))
    finally:
        server.stop()
    assert set(counts) == {b"w.a", b"w.b", b"r.x", b"r", b"l"}
    assert 4_000 <= counts[b"w.a"] <= 6_000 and counts[b"w.a"] + counts[b"w.b"] == N
    assert 2_000 <= counts[b"r.x"] <= 4_000 and counts[b"r.x"] + counts[b"r"] == N
    assert 4_000 <= counts[b"l"] <= 6_000


PERMISSIONS = """
mappings { foo: bar }
authorization {
  users: [
    {user: s, password: s}
    {user: tobar, password: tobar, permissions: {publish: bar}}
    {user: tofoo, password: tofoo, permissions: {publish: foo}}
  ]
}
"""


def test_publish_permissions_are_checked_on_the_mapped_subject() -> None:
    def play(server: Server) -> list[object]:
        out: list[object] = []
        for user in ("tobar", "tofoo"):
            with connect(server.port, "s") as sub, connect(server.port, user) as pub:
                sub.send(b"SUB > 1\r\n")
                assert sub.barrier() == b""
                pub.send(pubs("foo"))
                out += [pub.barrier(), subjects(sub.barrier())]
        return out

    got = both(PERMISSIONS, play)
    assert got["tidings"] == got["reference"] == [
        b"", [b"bar"], b"-ERR 'Permissions Violation for Publish to \"bar\"'\r\n", []]


def test_no_responders_names_the_mapped_subject() -> None:
    def play(server: Server) -> bytes:
        with RawConn(server.port) as requester:
            requester.connect(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,'
                              b'"no_responders":true}\r\n')
            requester.send(b"SUB _INBOX.> 1\r\nPUB foo _INBOX.1 0\r\n\r\n")
            return requester.barrier()

    got = both(PERMISSIONS.replace("authorization", "no_auth_user: s\nauthorization"), play)
    assert got["tidings"] == got["reference"] == (
        b"HMSG _INBOX.1 1 35 35\r\nNATS/1.0 503\r\nNats-Subject: bar\r\n\r\n\r\n")


def _reload(server: Server, old: str, new: str) -> None:
    path = Path(server.config_path)
    path.write_text(path.read_text().replace(old, new))
    since = server.process_log.mark()
    assert server.proc is not None
    server.proc.send_signal(signal.SIGHUP)
    server.process_log.wait_for(re.escape("Reloaded server configuration"), 10, since)


RELOADED = """
mappings { foo: bar }
authorization { users: [{user: g, password: g}] }
accounts {
  A: { users: [{user: a, password: a}], mappings { foo: bar } }
}
"""
RELOAD_STEPS = [("mappings { foo: bar }", "mappings { foo: baz, x: y }"),
                ("mappings { foo: bar } }", "mappings { foo: baz, x: y } }"),
                ("mappings { foo: baz, x: y } }", "}")]


def test_a_reload_changes_the_mappings() -> None:
    """Top-level mappings changed, an account's changed, then removed: the next message
    follows each."""
    def play(server: Server) -> list[list[bytes]]:
        out = []
        for old, new in [("", ""), *RELOAD_STEPS]:
            if old:
                _reload(server, old, new)
            out.append(seen(server.port, pubs("foo", "x"), "g", "g"))
            out.append(seen(server.port, pubs("foo", "x"), "a", "a"))
        return out

    got = both(RELOADED, play)
    assert got["tidings"] == got["reference"]
    assert got["reference"][-2:] == [[b"baz", b"y"], [b"foo", b"x"]]


def test_a_reload_without_the_top_level_block_removes_its_mappings() -> None:
    """Where the reference keeps the global account's mappings when the block is gone from
    the file (until a restart), tidings does as the file says."""
    server = start_configured("tidings", "mappings { foo: bar }\n", streaming=False)
    try:
        assert seen(server.port, pubs("foo")) == [b"bar"]
        _reload(server, "mappings { foo: bar }", "")
        assert seen(server.port, pubs("foo")) == [b"foo"]
        _reload(server, "", "mappings { foo: baz }")
        assert seen(server.port, pubs("foo")) == [b"baz"]
    finally:
        server.stop()


CLUSTERED = """
mappings { a: b, b: c }
"""


def _across(first: Server, second: Server) -> tuple[list[bytes], list[bytes]]:
    """What a subscriber on `second` sees of "a" and "b" published on `first`, and of the
    same published on `second`."""
    with connect(second.port) as sub, connect(first.port) as pub:
        sub.send(b"SUB > 1\r\n")
        assert sub.barrier() == b""

        def crossed() -> bool:
            pub.send(b"PUB probe 0\r\n\r\n")
            try:
                return bool(sub.read_until(lambda b: b"MSG probe" in b, timeout=0.1))
            except Timeout:
                return False

        wait_until(crossed, 30, "the route carrying the subscription", interval=0)
        sub.barrier()
        pub.send(pubs("a", "b", "end"))
        assert pub.barrier() == b""
        assert sub.read_until(lambda b: b"MSG end " in b)
        remote = subjects(sub.take())
    return remote, seen(second.port, pubs("a", "b"))


def test_a_message_is_mapped_where_a_client_published_it() -> None:
    got = {}
    for kind in KINDS:
        first = start_configured(kind, CLUSTERED, streaming=False, cluster=True,
                                 cluster_name="maps")
        try:
            second = start_configured(kind, CLUSTERED, streaming=False, cluster=True,
                                      cluster_name="maps", routes=[first])
            try:
                got[kind] = _across(first, second)
            finally:
                second.stop()
        finally:
            first.stop()
    assert got["tidings"] == got["reference"] == ([b"b", b"c", b"end"], [b"b", b"c"])


SCOPED = """
mappings {
  geo: [{destination: geo.eu, weight: 100, cluster: eu}, {destination: geo.any, weight: 100}]
  x: [{destination: x.us, weight: 100%, cluster: us}]
}
"""


def test_cluster_scoped_destinations_replace_the_others_in_their_cluster() -> None:
    got = {}
    for kind in KINDS:
        server = start_configured(kind, SCOPED, streaming=False, cluster=True,
                                  cluster_name="eu")
        try:
            got[kind] = seen(server.port, pubs("geo", "x"))
        finally:
            server.stop()
    assert got["tidings"] == got["reference"] == [b"geo.eu", b"x"]


SERVICE = """
accounts {
  A: {
    users: [{user: a, password: a}]
    exports: [{service: "svc.>"}]
    mappings { "svc.x": "svc.y" }
  }
  B: {
    users: [{user: b, password: b}]
    imports: [{service: {account: A, subject: "svc.>"}}]
    mappings { "svc.z": "svc.x" }
  }
}
"""


def test_a_service_import_request_is_mapped_in_the_exporting_account() -> None:
    """A request from B on svc.x reaches A's responder on svc.y (A's mapping); one on svc.z
    is first mapped to svc.x in B, then to svc.y in A."""
    def play(server: Server) -> list[bytes]:
        with connect(server.port, "a") as responder, connect(server.port, "b") as requester:
            responder.send(b"SUB svc.> 1\r\n")
            assert responder.barrier() == b""
            requester.send(b"SUB _INBOX.> 1\r\nPUB svc.x _INBOX.1 0\r\n\r\n"
                           b"PUB svc.z _INBOX.2 0\r\n\r\nPUB svc.w _INBOX.3 0\r\n\r\n")
            assert requester.barrier() == b""
            return subjects(responder.barrier())

    got = both(SERVICE, play)
    assert got["tidings"] == got["reference"] == [b"svc.y", b"svc.y", b"svc.w"]


async def _jwt_mappings(kind: str, tmp_path: Path) -> list[str]:
    """The subjects a subscriber sees in an account whose JWT maps them."""
    tmp_path.mkdir()
    op, acc, user = Key.new("operator"), Key.new("account"), Key.new("user")
    mappings = {"foo": [{"subject": "bar"}],
                "w": [{"subject": "w.a", "weight": 50}, {"subject": "w.b", "weight": 50}],
                "p.*": [{"subject": "p.{{partition(4,1)}}.$1"}]}
    accounts = {acc.public: account_jwt(acc, op, mappings=mappings)}
    (tmp_path / "op.jwt").write_text(operator_jwt(op))
    creds = write_creds(tmp_path / "u.creds", user_jwt(user, acc), user)
    server = start_configured(kind, operator_config(tmp_path / "op.jwt", accounts),
                              streaming=False)
    try:
        nc = await nats.connect(server.url, user_credentials=str(creds),
                                allow_reconnect=False)
        got: list[str] = []
        done = asyncio.Event()

        async def on_msg(msg: Msg) -> None:
            got.append(msg.subject)
            if msg.subject == "end":
                done.set()

        await nc.subscribe(">", cb=on_msg)
        await nc.flush()
        for subject in ["foo", *["w"] * 1000, "p.1", "p.2", "p.order", "end"]:
            await nc.publish(subject, b"")
        await nc.flush()
        await asyncio.wait_for(done.wait(), 10)
        await nc.close()
        return got
    finally:
        server.stop()


async def test_an_account_jwts_mappings_apply(tmp_path: Path) -> None:
    got = {kind: await _jwt_mappings(kind, tmp_path / kind) for kind in KINDS}
    for kind in KINDS:
        weighted = Counter(s for s in got[kind] if s.startswith("w."))
        assert 300 <= weighted["w.a"] <= 700 and weighted.total() == 1000, (kind, weighted)
    fixed = {kind: [s for s in got[kind] if not s.startswith("w.")] for kind in KINDS}
    assert fixed["tidings"] == fixed["reference"]
    assert fixed["reference"][0] == "bar" and len(fixed["reference"]) == 5
