"""-V: the protocol trace, as the reference logs it at [TRC]: `<<- [OP args]` for what a
client sends (and `<<- MSG_PAYLOAD: ["..."]`), `->> [OP]` for what is sent back (and the
messages delivered).
A traced server pays for it; an untraced one runs the plain ClientConnection."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..logs import TRACE
from ..redact import redact_connect
from .client import ClientConnection

if TYPE_CHECKING:
    from .server import Server

log = logging.getLogger("tidings.server")


class TracedClientConnection(ClientConnection):
    """A client connection whose every operation is logged (no compiled fast path)."""

    __slots__ = ()
    skips_unrouted = False  # every PUB through on_pub, to be traced

    def __init__(self, server: Server) -> None:
        super().__init__(server)
        self.parser.route_pubs_to(self.on_pub, skip_unrouted=False)

    def _in(self, op: str, payload: bytes | None = None) -> None:
        log.log(TRACE, "%s - <<- [%s]", self.describe(), op)
        if payload is not None:
            log.log(TRACE, '%s - <<- MSG_PAYLOAD: ["%s"]', self.describe(),
                    payload.decode("utf-8", "replace"))

    def on_connect(self, arg: bytes) -> None:
        # Secrets in a traced CONNECT are replaced, as the reference does.
        self._in("CONNECT " + redact_connect(arg.decode("utf-8", "replace")))
        super().on_connect(arg)

    def on_sub(self, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        args = b" ".join(x for x in (subject, queue, sid) if x)
        self._in("SUB " + args.decode("utf-8", "replace"))
        super().on_sub(subject, queue, sid)

    def on_unsub(self, sid: bytes, max_msgs: int) -> None:
        self._in(f"UNSUB {sid.decode('utf-8', 'replace')}" + (f" {max_msgs}" if max_msgs > 0
                                                              else ""))
        super().on_unsub(sid, max_msgs)

    def on_pub(self, subject: bytes, reply: bytes | None, payload: bytes) -> None:
        head = b" ".join(x for x in (subject, reply) if x).decode("utf-8", "replace")
        self._in(f"PUB {head} {len(payload)}", payload)
        super().on_pub(subject, reply, payload)

    def on_hpub(self, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes) -> None:
        head = b" ".join(x for x in (subject, reply) if x).decode("utf-8", "replace")
        self._in(f"HPUB {head} {hdr_len} {len(data)}", data)
        super().on_hpub(subject, reply, hdr_len, data)

    def on_ping(self) -> None:
        self._in("PING")
        super().on_ping()

    def on_pong(self) -> None:
        self._in("PONG")
        super().on_pong()

    def queue(self, data: bytes) -> None:
        if not data.startswith(b"MSG ") and not data.startswith(b"INFO "):
            line = data.split(b"\r\n", 1)[0].decode("utf-8", "replace")
            log.log(TRACE, "%s - ->> [%s]", self.describe(), line)
        super().queue(data)


def traced_deliver(server: Server) -> Callable[..., bool]:
    """The server's delivery, logging each message it hands to a client as the reference
    does: `->> [MSG subject sid [reply] size]` and `->> MSG_PAYLOAD: ["..."]`."""
    deliver = server._deliver

    def deliver_traced(pub: Any, sub: Any, frame: Any, plain_frame: Any) -> bool:
        if not deliver(pub, sub, frame, plain_frame):
            return False
        client = sub.client
        if client.is_route or getattr(client, "internal", False):
            return True  # (the process's own client is not traced, as the reference's)
        if plain_frame is not None and not client.headers:
            frame = plain_frame
        head, tail, big, size = frame
        line = (head + sub.sid_sp + tail).split(b"\r\n", 1)
        payload = big if big is not None else line[1][:-2] if len(line) > 1 else b""
        name = client.describe() if hasattr(client, "describe") else f"cid:{client.cid}"
        log.log(TRACE, "%s - ->> [%s]", name, line[0].decode("utf-8", "replace"))
        log.log(TRACE, '%s - ->> MSG_PAYLOAD: ["%s"]', name, payload.decode("utf-8", "replace"))
        return True

    return deliver_traced
