"""Property tests against live servers.

1. Random bytes never crash tidings and never leave a connection hanging: after them (and a
   padding that completes any pending payload), the connection is either closed or still
   answers PING with PONG; the server process is alive and serves a new client.
2. Random sequences of plausible operations (valid frames, broken ones, odd blanks and line
   ends, split at random places) get the same answer from tidings and the reference.

TIDINGS_FUZZ_EXAMPLES=5000 runs more examples than the default (e.g. before a release).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.harness.rawnats import RawConn, run_exchange

from .conftest import ServerPair
from .test_differential import ALLOWED, comparable, describe

FUZZ = settings(
    max_examples=int(os.environ.get("TIDINGS_FUZZ_EXAMPLES", 150)),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

SMALL_MAX_PAYLOAD = 64  # the "small" configuration (see conftest.CONFIGS)
QUIET = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'

FRAGMENTS = [
    QUIET, b'CONNECT {"verbose":true}\r\n', b"PUB ", b"pub ", b"HPUB ", b"SUB ", b"UNSUB ",
    b"PING", b"PONG", b"CONNECT ", b"INFO ", b"MSG ", b"HMSG ", b"+OK", b"-ERR ", b"foo",
    b"foo.bar", b"foo.*", b">", b"..", b"r.1", b"q", b"1", b"0", b"5", b"22", b"99999999999",
    b"-1", b" ", b"\t", b"\r\n", b"\n", b"\r", b"hello", b"NATS/1.0\r\nA: b\r\n\r\n",
    b'{"verbose":false}', b"{", b"\x00", b"\xff", b"PUB foo 5\r\nhello\r\n", b"SUB foo 1\r\n",
]
random_bytes = st.one_of(
    st.binary(min_size=1, max_size=300),
    st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=40).map(b"".join),
    st.tuples(st.just(QUIET), st.lists(st.sampled_from(FRAGMENTS), max_size=30)).map(
        lambda t: t[0] + b"".join(t[1])
    ),
)
# PING lines long enough to fill any payload the small server accepts: afterwards the parser
# is never waiting for payload bytes, so it must either answer or close.
PADDING = b"\r\n" + b"PING\r\n" * ((SMALL_MAX_PAYLOAD + 2) // 6 + 1)


@pytest.mark.parametrize("kind", ["tidings", "tidings-pure"])
@FUZZ
@given(data=random_bytes, cut=st.integers(min_value=0, max_value=300))
def test_random_bytes_close_or_answer(
    kind: str, data: bytes, cut: int, server_pairs: ServerPair
) -> None:
    server = server_pairs.get(kind, "small")
    with RawConn(server.port) as conn:
        cut %= len(data) + 1
        for piece in (data[:cut], data[cut:], PADDING):
            if piece and not conn.send(piece):
                break
        # Read what comes until the connection closes or the padding's last PONG arrives...
        conn.read_until(lambda b: b.endswith(b"PONG\r\n"))
        # ...then prove the state: either closed, or a fresh PING is answered.
        if not conn.eof:
            conn.is_closed()  # raises Timeout if the server neither closes nor answers
    assert server.proc.poll() is None, "tidings died"
    with RawConn(server.port) as other:
        other.connect(QUIET)


# -- differential fuzz -------------------------------------------------------------------
SUBJECTS = [b"foo", b"foo.bar", b"foo.*", b"foo.>", b">", b"*", b"a.b.c", b"foo..bar", b"x."]
LITERALS = [b"foo", b"foo.bar", b"a.b.c", b"foo.baz", b"nobody", b"foo..bar", b"foo.*"]
BLANKS = [b" ", b" ", b" ", b"\t", b"  ", b" \t "]
ENDS = [b"\r\n", b"\r\n", b"\r\n", b"\n"]


@st.composite
def frame(draw: st.DrawFn) -> bytes:
    def sep() -> bytes:
        return draw(st.sampled_from(BLANKS))

    def end() -> bytes:
        return draw(st.sampled_from(ENDS))

    def verb(name: bytes) -> bytes:
        case = draw(st.sampled_from(["upper", "upper", "lower", "mixed"]))
        if case == "lower":
            return name.lower()
        if case == "mixed":
            return bytes(c ^ 32 if i % 2 and 65 <= c <= 90 else c for i, c in enumerate(name))
        return name

    kind = draw(st.sampled_from(
        ["pub", "pub", "pub", "hpub", "sub", "sub", "unsub", "ping", "pong", "connect", "junk"]
    ))
    if kind in ("pub", "hpub"):
        subject = draw(st.sampled_from(LITERALS))
        reply = draw(st.sampled_from([None, None, b"r.1", b"r.2"]))
        payload = draw(st.binary(max_size=SMALL_MAX_PAYLOAD + 4))
        fields = [subject] + ([reply] if reply else [])
        if kind == "pub":
            size = len(payload) + draw(st.sampled_from([0, 0, 0, 0, 1, -1]))
            fields.append(b"%d" % max(size, 0))
            return verb(b"PUB") + sep() + sep().join(fields) + end() + payload + b"\r\n"
        hdr = b"NATS/1.0\r\nK: " + draw(st.sampled_from([b"v", b"V", b"x y"])) + b"\r\n\r\n"
        fields += [b"%d" % len(hdr), b"%d" % (len(hdr) + len(payload))]
        return verb(b"HPUB") + sep() + sep().join(fields) + end() + hdr + payload + b"\r\n"
    if kind == "sub":
        sid = draw(st.sampled_from([b"1", b"2", b"3", b"4"]))
        fields = [draw(st.sampled_from(SUBJECTS))]
        if draw(st.booleans()):
            fields.append(b"q" + sid)  # one member per group: delivery is deterministic
        return verb(b"SUB") + sep() + sep().join(fields + [sid]) + end()
    if kind == "unsub":
        sid = draw(st.sampled_from([b"1", b"2", b"3", b"9"]))
        n = draw(st.sampled_from([b"", b"", b"1", b"2", b"0"]))
        return verb(b"UNSUB") + sep() + sid + (sep() + n if n else b"") + end()
    if kind == "ping":
        return verb(b"PING") + end()
    if kind == "pong":
        return verb(b"PONG") + end()
    if kind == "connect":
        opts = draw(st.sampled_from([
            b'{"verbose":false,"pedantic":false,"headers":true}',
            b'{"verbose":true,"headers":true}', b'{"verbose":false,"pedantic":true}',
            b'{"verbose":false,"echo":false,"headers":true,"no_responders":true}',
        ]))
        return verb(b"CONNECT") + sep() + opts + end()
    return draw(st.sampled_from(
        [b"FOO\r\n", b"PUB foo\r\n", b"SUB\r\n", b"\r\n", b"PUB foo 999999999\r\n", b"+OK\r\n"]
    ))


@st.composite
def session(draw: st.DrawFn) -> list[bytes]:
    frames = draw(st.lists(frame(), min_size=1, max_size=12))
    whole = QUIET + b"".join(frames)
    cut = draw(st.integers(min_value=1, max_value=len(whole)))
    return [whole[:cut], whole[cut:]] if cut < len(whole) else [whole]


# Exchanges that are allowed to differ contain these (see test_differential.ALLOWED).
_ALLOWED_MARKERS = (b"_GR_.", b"$NRG.")


@FUZZ
@given(pieces=session())
def test_random_sessions_match_reference(pieces: list[bytes], server_pairs: ServerPair) -> None:
    assert "pub_reserved_gateway_subject" in ALLOWED  # the markers below mirror that entry
    data = b"".join(pieces)
    if any(m in data for m in _ALLOWED_MARKERS):
        return
    ref = run_exchange(server_pairs.get("reference", "small").port, pieces)
    for kind in ("tidings", "tidings-pure"):
        ours = run_exchange(server_pairs.get(kind, "small").port, pieces)
        # Deliveries to several subscriptions of one subject come in a random order from the
        # reference, so the lines are compared as a multiset.
        assert (comparable(ours.data, True), ours.closed, ours.timed_out) == (
            comparable(ref.data, True), ref.closed, ref.timed_out
        ), f"\n input:     {data!r}\n {kind}: {describe(ours)}\n reference: {describe(ref)}"


def test_server_survives_fuzzing(server_pairs: ServerPair) -> None:
    """After everything above, the servers still serve new clients."""
    for kind in ("tidings", "tidings-pure"):
        server = server_pairs.get(kind, "small")
        assert server.proc.poll() is None
        with RawConn(server.port) as conn:
            conn.connect(QUIET)
            conn.send(b"SUB s 1\r\nPUB s 2\r\nok\r\n")
            assert conn.barrier() == b"MSG s 1 2\r\nok\r\n"
