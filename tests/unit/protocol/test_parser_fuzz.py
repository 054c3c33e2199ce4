"""Property tests: arbitrary bytes never crash the parsers, and how bytes are split across
reads never changes what the client-op parser reports."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.protocol.errors import ProtocolError
from tidings.protocol.parser import ClientOpParser, scan_pubs

from .recorder import ClientOps, feed_client, feed_server

FUZZ = settings(
    max_examples=int(os.environ.get("TIDINGS_FUZZ_EXAMPLES", 300)),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# Pieces that make parsers go deep: verbs in several cases, fields, sizes, line ends.
FRAGMENTS = [
    b"PUB ", b"pub ", b"HPUB ", b"SUB ", b"UNSUB ", b"PING", b"PONG", b"CONNECT ", b"INFO ",
    b"MSG ", b"HMSG ", b"+OK", b"-ERR ", b"foo", b"foo.bar", b"foo.*", b">", b"..", b"r.1",
    b"q", b"1", b"0", b"5", b"22", b"99999999999", b"-1", b" ", b"\t", b"  ", b"\r\n", b"\n",
    b"\r", b"hello", b"NATS/1.0\r\nA: b\r\n\r\n", b'{"verbose":false}', b"{", b"\x00", b"\xff",
]
op_bytes = st.one_of(
    st.binary(max_size=200),
    st.lists(st.sampled_from(FRAGMENTS), max_size=40).map(b"".join),
)


def _cuts(data: bytes, positions: list[int]) -> list[bytes]:
    cuts = sorted({p % (len(data) + 1) for p in positions})
    out, prev = [], 0
    for c in cuts:
        out.append(data[prev:c])
        prev = c
    out.append(data[prev:])
    return out


@FUZZ
@given(
    data=op_bytes,
    positions=st.lists(st.integers(min_value=0, max_value=10_000), max_size=6),
    headers=st.booleans(),
    pedantic=st.booleans(),
    awaiting_connect=st.booleans(),
    max_payload=st.sampled_from([0, 4, 64, 1024 * 1024]),
    max_control_line=st.sampled_from([8, 32, 4096]),
)
def test_client_parser_only_raises_protocol_error(
    data: bytes,
    positions: list[int],
    headers: bool,
    pedantic: bool,
    awaiting_connect: bool,
    max_payload: int,
    max_control_line: int,
) -> None:
    """Whatever arrives, however split: operations or ProtocolError, nothing else; and the
    same operations and error as when it all arrives at once."""
    kw: dict[str, Any] = dict(
        headers=headers,
        pedantic=pedantic,
        awaiting_connect=awaiting_connect,
        max_payload=max_payload,
        max_control_line=max_control_line,
    )
    whole_ops, whole_err = feed_client(data, **kw)
    split_ops, split_err = feed_client(_cuts(data, positions), **kw)
    assert split_ops == whole_ops
    assert (split_err is None) == (whole_err is None)
    if whole_err is not None and split_err is not None:
        assert split_err.err == whole_err.err


@FUZZ
@given(data=op_bytes, positions=st.lists(st.integers(min_value=0, max_value=10_000), max_size=4))
def test_client_parser_with_compiled_scanner(data: bytes, positions: list[int]) -> None:
    """The compiled scanner (bulk mode, with an interest cache) reports the same operations
    as the pure-Python parser, except the publishes it drops because nobody listens."""
    empty = ((), ())
    cache: dict[bytes, Any] = {b"foo": empty, b"foo.bar": ("someone",)}

    def run(interest: Any, chunks: list[bytes]) -> tuple[list[Any], str | None, bool]:
        rec = ClientOps()
        parser = ClientOpParser(rec, 1024, 4096, interest=interest)
        parser.bulk = True
        parser.headers = True
        try:
            for chunk in chunks:
                parser.feed(chunk)
        except ProtocolError as exc:
            return rec.ops, exc.err, True
        return rec.ops, None, False

    pure = run(None, [data])
    fast = run((cache, empty), _cuts(data, positions))
    dropped = [op for op in pure[0] if op[0] == "PUB" and op[1] == b"foo" and op[2] is None]
    kept = [op for op in pure[0] if op not in dropped or scan_pubs is None]
    if scan_pubs is None:
        assert fast == pure
        return
    # Drops happen only in runs the scanner handles; the Python path still delivers them.
    assert [op for op in fast[0] if op not in dropped] == [op for op in kept if op not in dropped]
    assert fast[1:] == pure[1:]


@FUZZ
@given(data=op_bytes, positions=st.lists(st.integers(min_value=0, max_value=10_000), max_size=6))
def test_server_parser_only_raises_protocol_error(data: bytes, positions: list[int]) -> None:
    whole_ops, whole_err = feed_server(data)
    split_ops, split_err = feed_server(_cuts(data, positions))
    assert split_ops == whole_ops
    assert (split_err is None) == (whole_err is None)
