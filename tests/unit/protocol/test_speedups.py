"""The compiled PUB scanner gives exactly what the pure-Python parser gives."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.protocol import parser as parser_mod
from tidings.protocol.errors import ProtocolError
from tidings.protocol.parser import ClientOpParser

pytestmark = pytest.mark.skipif(parser_mod.scan_pubs is None, reason="compiled scanner not built")

EMPTY = ((), ())


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def __getattr__(self, name: str):  # on_* callbacks
        return lambda *args: self.events.append((name, *args))


def run(data: list[bytes], interest: dict[bytes, object] | None, keep_replies: bool = False):
    rec = Recorder()
    p = ClientOpParser(rec, max_payload=1024, max_control_line=64,
                       interest=(interest, EMPTY) if interest is not None else None)
    p.bulk = True
    p.headers = True
    p.keep_replies = keep_replies
    error = None
    try:
        for chunk in data:
            p.feed(chunk)
    except ProtocolError as exc:
        error = exc.err
    return rec.events, error, p.unrouted_msgs, p.unrouted_bytes


def test_skips_only_messages_nobody_listens_to() -> None:
    data = b"PUB a 1\r\nx\r\nPUB b 2\r\nyy\r\nPUB a r 1\r\nz\r\nPING\r\nPUB b 0\r\n\r\n"
    events, error, skipped, skipped_bytes = run([data], {b"a": EMPTY, b"b": ("sub",)})
    assert error is None
    assert events == [
        ("on_pub", b"b", None, b"yy"),
        ("on_ping",),
        ("on_pub", b"b", None, b""),
    ]
    assert (skipped, skipped_bytes) == (2, 2)


def test_requests_kept_for_no_responders() -> None:
    data = b"PUB a r 1\r\nz\r\nPUB a 1\r\nx\r\n"
    events, _, skipped, _ = run([data], {b"a": EMPTY}, keep_replies=True)
    assert events == [("on_pub", b"a", b"r", b"z")]
    assert skipped == 1


frames = st.sampled_from([
    b"PUB a 1\r\nx\r\n", b"PUB b r 2\r\nyy\r\n", b"PUB  a 1\r\nx\r\n", b"PUB\ta 1\r\nx\r\n",
    b"PUB a 2000\r\n", b"PUB a 1\r\nxx\r\n", b"PING\r\n", b"SUB a 1\r\n", b"pub a 0\r\n\r\n",
    b"PUB a b c 1\r\nx\r\n", b"PUB " + b"s" * 80 + b" 1\r\nx\r\n", b"PUB a 01\r\nx\r\n",
    b"PUB a 1\nx\r\n", b"PUB a\r 1\r\nx\r\n", b"HPUB a 12 12\r\nNATS/1.0\r\n\r\n\r\n",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(frames, max_size=12), st.data())
def test_same_operations_as_pure_python(parts: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(parts)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=4)))
    chunks = [stream[i:j] for i, j in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    # Every subject has listeners, so the scanner drops nothing: results must be identical.
    listening = {b"a": ("sub",), b"b": ("sub",), b"s" * 80: ("sub",)}
    fast = run(chunks, listening)
    pure = run(chunks, None)
    assert fast[:2] == pure[:2]


def test_on_a_route_only_the_global_accounts_messages_are_skipped() -> None:
    """The route scanner (RMSG) skips a message nobody listens to by the global account's
    index: a message of another account goes on to be routed by that account's."""
    scanned: list[tuple[bytes, bytes, bytes | None, bytes]] = []
    buf = (b"RMSG $G quiet 2\r\nhi\r\n" b"RMSG A quiet 2\r\nhi\r\n"
           b"RMSG $GX quiet 2\r\nhi\r\n")
    pos, skipped, skipped_bytes = parser_mod.scan_pubs(
        buf, 0, 1024, 1024, {b"quiet": EMPTY}, EMPTY, False, scanned, 2)
    assert (pos, skipped, skipped_bytes) == (len(buf), 1, 2)
    assert [(subject, account) for subject, account, _, _ in scanned] == [
        (b"quiet", b"A"), (b"quiet", b"$GX")]
