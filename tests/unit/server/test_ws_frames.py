"""The WebSocket frame reader and writer (tidings/server/ws_frames.py), sans-IO: frames split
at every byte, the compiled unmasking against the pure one, compressed messages and their
bounds, close frames. (What a server does with frames, against the reference, is in
tests/integration/server/test_websocket_frames.py.)"""

from __future__ import annotations

import os
import zlib

import pytest

from tests.harness.wsframes import (
    BINARY,
    CLOSE,
    CONTINUATION,
    PING,
    RSV1,
    close_payload,
    deflated,
    frame,
)
from tidings.server import ws_frames
from tidings.server.ws_frames import FrameReader, close_answer, unmask_pure


@pytest.mark.parametrize("offset", range(5))
def test_compiled_unmasking_is_the_pure_one(offset: int) -> None:
    key = os.urandom(4)
    for size in (0, 1, 7, 8, 9, 1000):
        data = os.urandom(size)
        expected = bytes(b ^ key[(i + offset) & 3] for i, b in enumerate(data))
        assert unmask_pure(data, key, offset) == expected
        assert ws_frames.ws_unmask(data, key, offset) == expected


def stream() -> bytes:
    return (frame(BINARY, b"CONNECT {}\r\n", fin=False) + frame(PING, b"hi")
            + frame(CONTINUATION, b"PING\r\n" * 30) + frame(BINARY, b"x" * 70000)
            + frame(BINARY, b"", mask=True) + frame(CLOSE, close_payload(1000, b"bye")))


def test_frames_split_at_every_byte() -> None:
    data = stream()
    whole = FrameReader()
    expected = whole.feed(data)
    assert expected == b"CONNECT {}\r\n" + b"PING\r\n" * 30 + b"x" * 70000
    for cut in range(len(data) + 1):
        reader = FrameReader()
        got = reader.feed(data[:cut]) + reader.feed(data[cut:])
        assert got == expected, cut
        assert (reader.pings, reader.close, reader.error) == ([b"hi"], close_payload(1000, b"bye"),
                                                              None)


def test_one_byte_at_a_time() -> None:
    reader = FrameReader()
    got = b"".join(reader.feed(bytes([b])) for b in stream())
    assert got.startswith(b"CONNECT {}\r\n") and reader.close is not None


def test_nothing_is_read_after_a_close_or_an_error() -> None:
    reader = FrameReader()
    assert reader.feed(frame(CLOSE) + frame(BINARY, b"PING\r\n")) == b""
    assert reader.close == b"" and reader.feed(frame(BINARY, b"PING\r\n")) == b""
    reader = FrameReader()
    assert reader.feed(frame(BINARY, b"a") + frame(BINARY, b"b", mask=False)) == b"a"
    assert reader.error is not None and reader.error.reason == "mask bit missing"
    assert reader.feed(frame(BINARY, b"c")) == b""


def test_compressed_message_in_fragments() -> None:
    body = deflated(b"PING\r\n" * 100)
    reader = FrameReader(compressed=True)
    data = (frame(BINARY, body[:3], rsv=RSV1, fin=False) + frame(CONTINUATION, body[3:9],
                                                                  fin=False)
            + frame(PING, b"between") + frame(CONTINUATION, body[9:]))
    assert reader.feed(data) == b"PING\r\n" * 100 and reader.pings == [b"between"]


def test_compressed_bounds() -> None:
    reader = FrameReader(compressed=True, max_payload=600)
    out = reader.feed(frame(BINARY, deflated(b"PING\r\n" * 200), rsv=RSV1))
    assert out == (b"PING\r\n" * 200)[:600]
    assert reader.error is not None and not reader.error.protocol
    held = FrameReader(compressed=True, max_payload=100)
    assert held.feed(frame(BINARY, os.urandom(801), rsv=RSV1, fin=False)) == b""
    assert held.error is not None and held.error.reason == "maximum payload exceeded"
    bad = FrameReader(compressed=True)
    bad.feed(frame(BINARY, b"\xff\xff\xff\xff", rsv=RSV1))
    assert bad.error is not None and "invalid compressed data" in bad.error.reason


@pytest.mark.parametrize(("payload", "answer"), [
    (b"", b""),
    (close_payload(1000, b"bye"), close_payload(1000, b"bye")),
    (close_payload(4999), close_payload(4999)),
    (close_payload(1001, b"\xc3"), close_payload(1007, b"invalid utf8 body in close frame")),
])
def test_close_answers(payload: bytes, answer: bytes) -> None:
    assert close_answer(payload) == answer


@pytest.mark.parametrize("status", [0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000])
def test_close_statuses_no_endpoint_may_send(status: int) -> None:
    with pytest.raises(ws_frames.FrameError, match=f"invalid close status code {status}"):
        close_answer(close_payload(status))


def test_deflater_messages_stand_alone() -> None:
    """No context takeover: each message inflates on its own."""
    deflater = ws_frames.Deflater()
    for message in (b"hello " * 100, b"hello " * 100, os.urandom(500)):
        body = deflater.deflate(message)
        assert zlib.decompressobj(-15).decompress(body + b"\x00\x00\xff\xff") == message


def test_headers_of_each_length() -> None:
    assert ws_frames.header(BINARY, 125) == b"\x82\x7d"
    assert ws_frames.header(BINARY, 126) == b"\x82\x7e\x00\x7e"
    assert ws_frames.header(BINARY, 65536) == b"\x82\x7f" + (65536).to_bytes(8, "big")
    assert ws_frames.header(BINARY, 5, compressed=True) == b"\xc2\x05"
