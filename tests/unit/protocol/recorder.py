"""Handlers that record what the parsers report, for the unit tests."""

from __future__ import annotations

from typing import Any

from tidings.protocol.errors import ProtocolError
from tidings.protocol.parser import ClientOpParser, ServerOpParser


class ClientOps:
    """A ClientOpHandler that appends every operation to `ops` as a tuple."""

    def __init__(self) -> None:
        self.ops: list[tuple[Any, ...]] = []

    def on_connect(self, arg: bytes) -> None:
        self.ops.append(("CONNECT", arg))

    def on_pub(self, subject: bytes, reply: bytes | None, payload: bytes) -> None:
        self.ops.append(("PUB", subject, reply, payload))

    def on_hpub(self, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes) -> None:
        self.ops.append(("HPUB", subject, reply, hdr_len, data))

    def on_sub(self, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        self.ops.append(("SUB", subject, queue, sid))

    def on_unsub(self, sid: bytes, max_msgs: int) -> None:
        self.ops.append(("UNSUB", sid, max_msgs))

    def on_ping(self) -> None:
        self.ops.append(("PING",))

    def on_pong(self) -> None:
        self.ops.append(("PONG",))

    def on_soft_error(self, err: str) -> None:
        self.ops.append(("ERR", err))

    def on_hpub_too_big(self, subject: bytes, hdr: bytes, size: int) -> None:
        self.ops.append(("HPUB_TOO_BIG", subject, hdr, size))


class ServerOps:
    """A ServerOpHandler that appends every operation to `ops` as a tuple."""

    def __init__(self) -> None:
        self.ops: list[tuple[Any, ...]] = []

    def on_info(self, info: dict[str, Any]) -> None:
        self.ops.append(("INFO", info))

    def on_msg(
        self, subject: bytes, sid: bytes, reply: bytes | None, hdr: bytes | None, payload: bytes
    ) -> None:
        self.ops.append(("MSG", subject, sid, reply, hdr, payload))

    def on_ping(self) -> None:
        self.ops.append(("PING",))

    def on_pong(self) -> None:
        self.ops.append(("PONG",))

    def on_ok(self) -> None:
        self.ops.append(("OK",))

    def on_err(self, message: str) -> None:
        self.ops.append(("-ERR", message))


def client_parser(
    headers: bool = True,
    pedantic: bool = False,
    max_payload: int = 1024 * 1024,
    max_control_line: int = 4096,
    **flags: Any,
) -> tuple[ClientOpParser, ClientOps]:
    rec = ClientOps()
    parser = ClientOpParser(rec, max_payload=max_payload, max_control_line=max_control_line)
    parser.headers = headers
    parser.pedantic = pedantic
    for name, value in flags.items():
        setattr(parser, name, value)
    return parser, rec


def feed_client(
    chunks: list[bytes] | bytes, **kw: Any
) -> tuple[list[tuple[Any, ...]], ProtocolError | None]:
    """Feed chunks to a fresh ClientOpParser; the ops it reported and the error it raised."""
    if isinstance(chunks, bytes):
        chunks = [chunks]
    parser, rec = client_parser(**kw)
    return run(parser, rec, chunks)


def run(
    parser: Any, rec: Any, chunks: list[bytes]
) -> tuple[list[tuple[Any, ...]], ProtocolError | None]:
    """Feed chunks to `parser`; the ops `rec` recorded and the error it raised."""
    try:
        for chunk in chunks:
            parser.feed(chunk)
    except ProtocolError as exc:
        return rec.ops, exc
    return rec.ops, None


def feed_server(chunks: list[bytes] | bytes) -> tuple[list[tuple[Any, ...]], ProtocolError | None]:
    if isinstance(chunks, bytes):
        chunks = [chunks]
    rec = ServerOps()
    return run(ServerOpParser(rec), rec, chunks)


def splits(data: bytes) -> list[list[bytes]]:
    """data whole, cut in two at every position, and fed one byte at a time."""
    out = [[data]]
    out += [[data[:i], data[i:]] for i in range(1, len(data))]
    out.append([data[i : i + 1] for i in range(len(data))])
    return out
