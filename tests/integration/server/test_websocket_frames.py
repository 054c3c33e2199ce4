"""WebSocket framing (RFC 6455 and permessage-deflate), on tidings and on the reference
nats-server from the same configuration: raw frames built byte by byte (wsframes.py) and
what each server does with them.

A frame that breaks a rule (no mask, a reserved bit, an unknown opcode, a control frame too
long or fragmented, a continuation without a start, a new message inside a fragmented one,
a bad close frame, a 64-bit length with its top bit) fails the connection: a close frame
with status 1002 and the reference's reason, then the TCP close, and nothing in the frame is
acted upon. The reference sends that close frame only when its writer gets to it before the
connection is torn down (most runs it does not), so for it the close frame is optional.

Everything else is answered as it comes: a fragment is parsed when it arrives (a PING in a
message not yet finished is answered at once; 3,000 one-byte fragments of garbage are a
parse error at the first), control frames may come between fragments, a frame may announce
more bytes than will ever come, and the server never waits for a message to end.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.harness.wsframes import (
    BINARY,
    CLOSE,
    CONTINUATION,
    PING,
    PONG,
    RSV1,
    RSV2,
    RSV3,
    TEXT,
    Outcome,
    RawWebSocket,
    close_payload,
    deflated,
    frame,
    masked,
)

from .test_websocket import KINDS, WsServer, start

pytestmark = pytest.mark.timeout(60)

CONNECT = b'CONNECT {"verbose":false}\r\n'
PMC = {"Sec-WebSocket-Extensions": "permessage-deflate"}
MAX_PAYLOAD = 64 * 1024


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, WsServer]]:
    tmp = tmp_path_factory.mktemp("wsframes")
    running = {kind: start(kind, tmp, "  no_tls: true\n  compression: true",
                           top=f"max_payload: {MAX_PAYLOAD}") for kind in KINDS}
    yield running
    for server in running.values():
        server.stop()


def outcomes(servers: dict[str, WsServer], data: bytes, until: bytes | None = None,
             headers: dict[str, str] | None = None) -> dict[str, Outcome]:
    """What each server does with `data` sent after the upgrade and INFO."""
    got = {}
    for kind, server in servers.items():
        with RawWebSocket(server.ws_port, headers=headers) as ws:
            ws.send(data)
            got[kind] = ws.outcome(until)
    return got


# -- frames that fail the connection --------------------------------------------------------
FAILING = [
    ("no-mask", frame(BINARY, CONNECT + b"PING\r\n", mask=False), "mask bit missing"),
    ("control-too-long", frame(PING, b"x" * 126),
     "control frame length bigger than maximum allowed of 125 bytes"),
    ("ping-fragmented", frame(PING, b"x", fin=False),
     "control frame does not have final bit set"),
    ("close-fragmented", frame(CLOSE, close_payload(1000), fin=False),
     "control frame does not have final bit set"),
    ("rsv2", frame(BINARY, CONNECT, rsv=RSV2), "RSV2 and RSV3 must be clear"),
    ("rsv3", frame(BINARY, CONNECT, rsv=RSV3), "RSV2 and RSV3 must be clear"),
    ("rsv1-not-negotiated", frame(BINARY, deflated(CONNECT), rsv=RSV1),
     "compressed frame received without negotiated permessage-deflate"),
    ("opcode-3", frame(3, CONNECT), "unknown opcode 3"),
    ("opcode-11", frame(11, b""), "unknown opcode 11"),
    ("continuation-without-start", frame(CONTINUATION, CONNECT), "invalid continuation frame"),
    ("new-message-inside-one", frame(BINARY, b"CONN", fin=False) + frame(BINARY, b"ECT {}"),
     "new message started before final frame for previous message was received"),
    ("close-1-byte", frame(CLOSE, b"\x03"), "close frame payload cannot be 1 byte"),
    ("close-status-999", frame(CLOSE, close_payload(999)), "invalid close status code 999"),
    ("close-status-1005", frame(CLOSE, close_payload(1005)), "invalid close status code 1005"),
    ("close-status-1016", frame(CLOSE, close_payload(1016)), "invalid close status code 1016"),
    ("close-status-5000", frame(CLOSE, close_payload(5000)), "invalid close status code 5000"),
    ("length-top-bit", frame(BINARY, b"", length=1 << 63), "invalid 64-bit payload length"),
]


@pytest.mark.parametrize(("data", "reason"), [(d, r) for _, d, r in FAILING],
                         ids=[name for name, _, _ in FAILING])
def test_a_broken_rule_fails_the_connection(servers: dict[str, WsServer], data: bytes,
                                            reason: str) -> None:
    got = outcomes(servers, data)
    for kind in KINDS:
        assert got[kind].closed and got[kind].data == b"" and not got[kind].pongs, (kind, got)
    assert got["tidings"].close == (1002, reason)
    assert got["reference"].close in (None, (1002, reason))


@pytest.mark.parametrize(("data", "reason"), [
    (frame(PING, b"p", rsv=RSV1), "control frame must not be compressed"),
    (frame(BINARY, deflated(CONNECT)[:3], rsv=RSV1, fin=False)
     + frame(CONTINUATION, deflated(CONNECT)[3:], rsv=RSV1), "invalid continuation frame"),
], ids=["compressed-control", "compressed-continuation"])
def test_compression_rules_once_negotiated(servers: dict[str, WsServer], data: bytes,
                                           reason: str) -> None:
    got = outcomes(servers, data, headers=PMC)
    for kind in KINDS:
        assert got[kind].closed and got[kind].data == b"", (kind, got)
    assert got["tidings"].close == (1002, reason)
    assert got["reference"].close in (None, (1002, reason))


def test_the_unmasked_frame_is_logged_as_a_read_error(servers: dict[str, WsServer]) -> None:
    outcomes(servers, frame(BINARY, CONNECT + b"PING\r\n", mask=False))
    for kind, server in servers.items():
        with RawWebSocket(server.ws_port) as ws:  # a barrier: the log line came before
            ws.send(frame(BINARY, CONNECT + b"PING\r\n"))
            ws.outcome(until=b"PONG\r\n")
        lines = [line for line in server.log_text().splitlines()
                 if "read error: mask bit missing" in line]
        assert lines and "[ERR]" in lines[0], (kind, lines)


# -- close frames from the client ---------------------------------------------------------------
@pytest.mark.parametrize(("payload", "answer"), [
    (b"", (None, "")),
    (close_payload(1000, b"bye"), (1000, "bye")),
    (close_payload(3000, b"ok"), (3000, "ok")),
    (close_payload(1000, b"\xff\xfe"), (1007, "invalid utf8 body in close frame")),
], ids=["no-status", "normal", "application-status", "bad-utf8"])
def test_a_close_frame_is_answered(servers: dict[str, WsServer], payload: bytes,
                                   answer: tuple[int | None, str]) -> None:
    got = outcomes(servers, frame(CLOSE, payload))
    for kind in KINDS:
        assert got[kind] == Outcome(close=answer, closed=True), (kind, got)


def test_a_close_frame_between_fragments_is_answered(servers: dict[str, WsServer]) -> None:
    data = frame(BINARY, b"CONN", fin=False) + frame(CLOSE, close_payload(1001, b"away"))
    got = outcomes(servers, data)
    for kind in KINDS:
        assert got[kind] == Outcome(close=(1001, "away"), closed=True), (kind, got)


# -- what is answered as it comes --------------------------------------------------------------
def fragments(data: bytes, size: int = 1, final: bool = False) -> bytes:
    """`data` as one message of `size`-byte fragments (the last one final if `final`)."""
    pieces = [data[i:i + size] for i in range(0, len(data), size)]
    out = frame(BINARY, pieces[0], fin=False)
    for i, piece in enumerate(pieces[1:], 1):
        out += frame(CONTINUATION, piece, fin=final and i == len(pieces) - 1)
    return out


ANSWERED = [
    ("masked", frame(BINARY, CONNECT + b"PING\r\n")),
    ("text-frame-not-utf8", frame(TEXT, CONNECT + b"PUB a 2\r\n\xff\xfe\r\nPING\r\n")),
    ("control-frame-of-125", frame(PING, b"x" * 125) + frame(BINARY, CONNECT + b"PING\r\n")),
    ("unsolicited-pong", frame(PONG, b"x") + frame(BINARY, CONNECT + b"PING\r\n")),
    ("ping-between-fragments", frame(BINARY, CONNECT + b"PI", fin=False) + frame(PING, b"p")
     + frame(CONTINUATION, b"NG\r\n", fin=False)),
    ("fragments-of-one-byte", fragments(CONNECT + b"PING\r\n", final=True)),
    ("empty-fragments", frame(BINARY, b"", fin=False) + frame(CONTINUATION, b"", fin=False)
     + frame(CONTINUATION, CONNECT + b"PING\r\n", fin=False)),
    ("longer-frame-than-sent", frame(BINARY, b"", length=1 << 40)
     + masked(CONNECT + b"PING\r\n")),
]


@pytest.mark.parametrize("data", [d for _, d in ANSWERED], ids=[n for n, _ in ANSWERED])
def test_answered_as_it_comes(servers: dict[str, WsServer], data: bytes) -> None:
    got = outcomes(servers, data, until=b"PONG\r\n")
    for kind in KINDS:
        assert got[kind].data == b"PONG\r\n" and got[kind].close is None, (kind, got)
        assert not got[kind].closed, kind
    assert got["tidings"].pongs == got["reference"].pongs


def test_3000_one_byte_fragments_are_parsed_as_they_come(servers: dict[str, WsServer]
                                                         ) -> None:
    """A message of 3,000 one-byte fragments, never finished: PINGs in it are answered,
    and garbage in it is a parse error at its first byte, as in the reference (tidings once
    waited for the message's end, holding the connection open)."""
    pings = fragments(CONNECT + b"PING\r\n" * 496)  # 3,003 fragments
    got = outcomes(servers, pings, until=b"PONG\r\n" * 496)
    for kind in KINDS:
        assert got[kind].data == b"PONG\r\n" * 496 and not got[kind].closed, (kind, got)
    garbage = fragments(b"x" * 3000)
    got = outcomes(servers, garbage)
    err = b"-ERR 'Unknown Protocol Operation'\r\n"
    assert got["tidings"] == Outcome(data=err, close=(1002, "Parse Error"), closed=True)
    assert got["reference"].closed and got["reference"].data in (b"", err)


def test_frames_split_at_every_byte(servers: dict[str, WsServer]) -> None:
    """Each byte in its own TCP segment: a frame header and its mask may be split anywhere."""
    data = frame(PING, b"ping") + frame(BINARY, CONNECT + b"PING\r\n", length=None)
    for kind, server in servers.items():
        with RawWebSocket(server.ws_port) as ws:
            for byte in data:
                ws.send(bytes([byte]))
            got = ws.outcome(until=b"PONG\r\n")
        assert (got.data, got.pongs) == (b"PONG\r\n", [b"ping"]), (kind, got)


def test_no_masking_when_the_client_asks(servers: dict[str, WsServer]) -> None:
    """`Nats-No-Masking: true` in the upgrade (the reference's extension): the answer says
    so, and unmasked frames are taken."""
    for kind, server in servers.items():
        with RawWebSocket(server.ws_port, headers={"Nats-No-Masking": "true"}) as ws:
            assert ws.header("Nats-No-Masking") == "true", (kind, ws.response_head)
            ws.send(frame(BINARY, CONNECT + b"PING\r\n", mask=False))
            assert ws.outcome(until=b"PONG\r\n").data == b"PONG\r\n", kind
        with RawWebSocket(server.ws_port) as ws:
            assert ws.header("Nats-No-Masking") is None, kind


# -- compressed messages --------------------------------------------------------------------
def test_compressed_messages_whole_and_fragmented(servers: dict[str, WsServer]) -> None:
    body = deflated(CONNECT + b"PING\r\n")
    whole = frame(BINARY, body, rsv=RSV1)
    split = (frame(BINARY, body[:2], rsv=RSV1, fin=False)
             + frame(CONTINUATION, body[2:5], fin=False) + frame(CONTINUATION, body[5:]))
    for data in (whole, split):
        got = outcomes(servers, data, until=b"PONG\r\n", headers=PMC)
        for kind in KINDS:
            assert got[kind].data == b"PONG\r\n" and not got[kind].closed, (kind, got)


def test_compressed_message_bigger_than_max_payload(servers: dict[str, WsServer]) -> None:
    """Decompressed, a message may hold max_payload bytes: past it the connection is closed
    (what came before was acted upon, as by the reference)."""
    pings = b"PING\r\n" * (MAX_PAYLOAD // 6 + 1000)
    data = frame(BINARY, deflated(CONNECT + pings), rsv=RSV1)
    got = outcomes(servers, data, headers=PMC)
    for kind in KINDS:
        out = got[kind]
        assert out.closed and out.close in (None, (1001, "Read Error")), (kind, out.close)
        assert out.data == b"PONG\r\n" * (len(out.data) // 6), kind
        assert len(out.data) // 6 <= MAX_PAYLOAD // 6, kind


def test_compressed_input_bounded(servers: dict[str, WsServer]) -> None:
    """Compressed bytes of one message are held until it ends: at most 8 times max_payload
    of them (the reference's bound), past it the connection is closed."""
    noise = bytes(range(256)) * (8 * MAX_PAYLOAD // 256 + 16)
    data = frame(BINARY, CONNECT, rsv=RSV1, fin=False) + frame(CONTINUATION, noise, fin=False)
    got = outcomes(servers, data, headers=PMC)
    for kind in KINDS:
        assert got[kind].closed and got[kind].data == b"", (kind, got[kind])


# -- the listener's upgrade -------------------------------------------------------------------
def test_data_sent_with_the_upgrade_request(servers: dict[str, WsServer]) -> None:
    """Frames sent before the 101 (in the same segment as the request) are refused, as by
    the reference: the connection closes without an upgrade."""
    for kind, server in servers.items():
        with socket.create_connection(("127.0.0.1", server.ws_port), timeout=5) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                         b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                         b"Sec-WebSocket-Version: 13\r\n\r\n"
                         + frame(BINARY, CONNECT + b"PING\r\n"))
            data = b""
            while chunk := conn.recv(4096):
                data += chunk
        assert b" 101 " not in data.split(b"\r\n", 1)[0], (kind, data[:200])



# -- random frames ---------------------------------------------------------------------------
FUZZ_PAYLOADS = [b"", b"PING\r\n", b"PONG\r\n", CONNECT, b"x", b"\xff", b"p" * 125,
                 b"p" * 126, close_payload(1000, b"ok"), close_payload(1005)]


@st.composite
def random_frame(draw: st.DrawFn) -> bytes:
    return frame(draw(st.sampled_from([CONTINUATION, TEXT, BINARY, 3, CLOSE, PING, PONG, 11])),
                 draw(st.sampled_from(FUZZ_PAYLOADS)),
                 fin=draw(st.booleans()),
                 mask=draw(st.sampled_from([True, True, True, False])),
                 rsv=draw(st.sampled_from([0, 0, 0, RSV1, RSV2, RSV3])))


@settings(max_examples=int(os.environ.get("TIDINGS_FUZZ_EXAMPLES", 60)), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(random_frame(), max_size=6), cut=st.integers(0, 400))
def test_random_frames_close_or_answer_as_the_reference(servers: dict[str, WsServer],
                                                         frames: list[bytes], cut: int) -> None:
    """Any run of frames, right or wrong, then CONNECT and PING, sent in two writes split
    anywhere: each server either closes the connection or answers the PING (and then a
    ping frame), and both do the same."""
    data = b"".join(frames) + frame(BINARY, CONNECT + b"PING\r\n")
    verdicts = {}
    for kind, server in servers.items():
        with RawWebSocket(server.ws_port) as ws:
            ws.send(data[:cut])
            ws.send(data[cut:])
            verdicts[kind] = "answered" if still_open(ws) else "closed"
    assert verdicts["tidings"] == verdicts["reference"], verdicts


def still_open(ws: RawWebSocket) -> bool:
    """After a PONG (or the close), whether the server answers a ping frame."""
    if ws.outcome(until=b"PONG\r\n").closed:
        return False
    ws.send(frame(PING, b"probe"))
    while True:
        try:
            opcode, payload = ws.read_frame()
        except EOFError:
            return False
        if (opcode, payload) == (PONG, b"probe"):
            return True


def test_still_serving_after_all_that(servers: dict[str, WsServer]) -> None:
    for kind, server in servers.items():
        assert server.proc.poll() is None, kind
        with RawWebSocket(server.ws_port) as ws:
            ws.send(frame(BINARY, CONNECT + b"PING\r\n"))
            assert ws.outcome(until=b"PONG\r\n").data == b"PONG\r\n", kind
    log = servers["tidings"].log_text()
    assert "Traceback" not in log and "internal error" not in log, log[-3000:]
