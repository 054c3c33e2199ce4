"""The parser's route session: the seed's SUB/UNSUB/MSG with RSID sids and the reference's
RS+/RS-/RMSG/HMSG, every frame split at every byte, with and without the compiled scanner."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.protocol import parser as parser_module
from tidings.protocol.errors import ProtocolError
from tidings.protocol.parser import ROUTE_CONTROL_LINE_FACTOR, ClientOpParser

from .recorder import ClientOps, run, splits

EMPTY = object()


class RouteOps(ClientOps):
    """Records the route operations too."""

    def on_info(self, info: dict[str, Any]) -> None:
        self.ops.append(("INFO", info))

    def on_err(self, message: str) -> None:
        self.ops.append(("-ERR", message))

    def on_remote_sub(self, fields: list[bytes], leaf: bool) -> None:
        self.ops.append(("LS+" if leaf else "RS+", *fields))

    def on_remote_unsub(self, fields: list[bytes], leaf: bool) -> None:
        self.ops.append(("LS-" if leaf else "RS-", *fields))

    def on_routed(self, account: bytes | None, subject: bytes, sid: bytes | None,
                  reply: bytes | None, queues: list[bytes] | None, hdr_len: int,
                  data: bytes) -> None:
        self.ops.append(("ROUTED", account, subject, sid, reply,
                         tuple(queues) if queues else None, hdr_len, data))


def route_parser(mode: int = 0, seed_hmsg: bool | None = None,
                 cache: dict[bytes, Any] | None = None) -> tuple[ClientOpParser, RouteOps]:
    rec = RouteOps()
    p = ClientOpParser(rec, 1024, 64, interest=(cache if cache is not None else {}, EMPTY),
                       route=True)
    p.seed_hmsg = seed_hmsg
    if mode:
        p.scan_mode = mode
        p.bulk = True
    return p, rec


def feed(data: bytes, **kw: Any) -> list[list[tuple[Any, ...]]]:
    """The ops of `data` fed whole, split in two at every byte, and byte by byte."""
    results = []
    for chunks in splits(data):
        p, rec = route_parser(**kw)
        for chunk in chunks:
            p.feed(chunk)
        results.append(rec.ops)
    return results


SEED = (
    b"SUB foo RSID:1:1\r\nSUB bar g1 QRSID:14:44\r\nUNSUB RSID:1:1\r\nUNSUB RSID:1:1 5\r\n"
    b"MSG foo RSID:1:1 5\r\nhello\r\nMSG foo RSID:1:1 INBOX.34 0\r\n\r\n"
    b"HMSG foo QRSID:3:4 r 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\nPONG\r\n"
)
SEED_OPS = [
    ("SUB", b"foo", None, b"RSID:1:1"),
    ("SUB", b"bar", b"g1", b"QRSID:14:44"),
    ("UNSUB", b"RSID:1:1", -1),
    ("UNSUB", b"RSID:1:1", 5),
    ("ROUTED", None, b"foo", b"RSID:1:1", None, None, -1, b"hello"),
    ("ROUTED", None, b"foo", b"RSID:1:1", b"INBOX.34", None, -1, b""),
    ("ROUTED", None, b"foo", b"QRSID:3:4", b"r", None, 12, b"NATS/1.0\r\n\r\nhi"),
    ("PING",),
    ("PONG",),
]

NATS = (
    b"RS+ $G foo\r\nRS+ $G bar g1 2\r\nRS- $G foo\r\nLS+ $G baz\r\nLS- $G baz\r\n"
    b"RMSG $G foo 5\r\nhello\r\nRMSG $G foo reply 2\r\nhi\r\n"
    b"RMSG $G foo + reply g1 g2 2\r\nhi\r\nRMSG $G foo | g1 2\r\nhi\r\n"
    b"HMSG $G foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\nHMSG $G foo | g1 12 12\r\nNATS/1.0\r\n\r\n\r\n"
    b"INFO {\"server_id\":\"S\"}\r\n-ERR 'Unknown Protocol Operation'\r\n+OK\r\n"
)
NATS_OPS = [
    ("RS+", b"$G", b"foo"),
    ("RS+", b"$G", b"bar", b"g1", b"2"),
    ("RS-", b"$G", b"foo"),
    ("LS+", b"$G", b"baz"),
    ("LS-", b"$G", b"baz"),
    ("ROUTED", b"$G", b"foo", None, None, None, -1, b"hello"),
    ("ROUTED", b"$G", b"foo", None, b"reply", None, -1, b"hi"),
    ("ROUTED", b"$G", b"foo", None, b"reply", (b"g1", b"g2"), -1, b"hi"),
    ("ROUTED", b"$G", b"foo", None, None, (b"g1",), -1, b"hi"),
    ("ROUTED", b"$G", b"foo", None, None, None, 12, b"NATS/1.0\r\n\r\nhi"),
    ("ROUTED", b"$G", b"foo", None, None, (b"g1",), 12, b"NATS/1.0\r\n\r\n"),
    ("INFO", {"server_id": "S"}),
    ("-ERR", "Unknown Protocol Operation"),
]


@pytest.fixture(params=["scanner", "pure"])
def scanner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "pure":
        monkeypatch.setattr(parser_module, "scan_pubs", None)
    elif parser_module.scan_pubs is None:
        pytest.skip("compiled scanner not built")
    return str(request.param)


@pytest.mark.parametrize("mode", [0, 1])
def test_seed_dialect(scanner: str, mode: int) -> None:
    for ops in feed(SEED, mode=mode):
        assert ops == SEED_OPS


@pytest.mark.parametrize("mode", [0, 2])
def test_reference_dialect(scanner: str, mode: int) -> None:
    for ops in feed(NATS, mode=mode, seed_hmsg=False):
        assert ops == NATS_OPS


def test_hmsg_form_follows_the_dialect() -> None:
    """Until the dialect is known an HMSG whose second field is a route sid is the seed's."""
    frame = b"HMSG foo RSID:1:2 2 2\r\nhi\r\n"
    assert feed(frame)[0] == [("ROUTED", None, b"foo", b"RSID:1:2", None, None, 2, b"hi")]
    # In the reference's dialect the same fields read account, subject, reply.
    assert feed(frame, seed_hmsg=False)[0] == [
        ("ROUTED", b"foo", b"RSID:1:2", None, None, None, 2, b"hi")]


def test_scanner_skips_messages_nobody_wants() -> None:
    """A run of routed messages for a subject the cache says nobody listens to is dropped
    by the scanner, the others are handed on in order."""
    cache: dict[bytes, Any] = {b"nobody": EMPTY}
    p, rec = route_parser(mode=2, cache=cache)
    p.feed(b"RMSG $G nobody 2\r\nhi\r\nRMSG $G foo 2\r\nho\r\nRMSG $G nobody r 1\r\nx\r\n")
    assert rec.ops == [("ROUTED", b"$G", b"foo", None, None, None, -1, b"ho")]
    assert p.unrouted_msgs == 2


@pytest.mark.parametrize("bad", [
    b"RMSG $G foo\r\n",  # no size
    b"RMSG $G foo x reply 2\r\nhi\r\n",  # five fields without + or |
    b"MSG foo 2\r\nhi\r\n",  # the seed's MSG needs a sid
    b"RMSG $G foo -1\r\n",
    b"HMSG $G foo 5 2\r\nhi\r\n",  # header larger than the message
])
def test_malformed_routed_messages_close(bad: bytes) -> None:
    p, rec = route_parser(seed_hmsg=False)
    with pytest.raises(ProtocolError):
        p.feed(bad)


def test_route_control_lines_are_longer_than_a_clients() -> None:
    """The reference allows 16 times max_control_line on a route (64 here)."""
    names = b" ".join(b"q%d" % i for i in range(100))
    assert 64 < len(names) < 64 * ROUTE_CONTROL_LINE_FACTOR
    p, rec = route_parser(seed_hmsg=False)
    p.feed(b"RMSG $G foo | " + names + b" 2\r\nhi\r\n")
    assert rec.ops[0][5] == tuple(names.split())
    with pytest.raises(ProtocolError):
        p.feed(b"RS+ $G " + b"a" * (64 * ROUTE_CONTROL_LINE_FACTOR + 1) + b"\r\n")


def test_a_route_knows_no_client_only_operation() -> None:
    """Unknown operations get the reference's -ERR, as on the client port."""
    p, _ = route_parser()
    with pytest.raises(ProtocolError) as err:
        p.feed(b"XYZ foo\r\n")
    assert err.value.err == "Unknown Protocol Operation"


ROUTE_FRAGMENTS = [
    b"RMSG ", b"RS+ ", b"RS- ", b"LS+ ", b"LS- ", b"LMSG ", b"MSG ", b"HMSG ", b"SUB ",
    b"UNSUB ", b"PUB ", b"PING", b"PONG", b"INFO ", b"CONNECT ", b"-ERR ", b"+OK", b"$G ",
    b"foo", b"RSID:1:2", b"QRSID:3:4", b"+ ", b"| ", b"q1 ", b"r ", b"2", b"0", b"12", b" ",
    b"\r\n", b"\n", b"hi", b"{}", b'{"server_id":"S"}', b"\x00", b"\xff",
]


@settings(max_examples=300, deadline=None, database=None)
@given(data=st.one_of(st.binary(max_size=200),
                      st.lists(st.sampled_from(ROUTE_FRAGMENTS), max_size=40).map(b"".join)),
       mode=st.sampled_from([0, 1, 2]), seed_hmsg=st.sampled_from([None, True, False]),
       cut=st.integers(min_value=0, max_value=400))
def test_route_input_never_raises_anything_else(data: bytes, mode: int,
                                                seed_hmsg: bool | None, cut: int) -> None:
    """Arbitrary bytes on a route: operations or a ProtocolError, nothing else, and the
    same operations however the bytes are split (up to the error)."""
    whole, whole_err = run(*route_parser(mode, seed_hmsg), [data])
    split, split_err = run(*route_parser(mode, seed_hmsg), [data[:cut], data[cut:]])
    assert (whole_err is None) == (split_err is None)
    if whole_err is None:
        assert whole == split
