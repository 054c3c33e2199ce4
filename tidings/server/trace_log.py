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
    from .msgtrace import MsgTrace
    from .server import Server

log = logging.getLogger("tidings.server")


class TracedClientConnection(ClientConnection):
    """A client connection whose every operation is logged (no compiled fast path).

    A message is logged as the reference logs it: its operation as published, the subject
    mapping that applies (`MAPPING from -> to`), then its payload, before it is routed."""

    __slots__ = ("_path", "_unlogged")
    skips_unrouted = False  # every PUB through _traced_pub, to be traced

    def __init__(self, server: Server) -> None:
        self._unlogged: bytes | None = None  # a payload to log once its subject is settled
        super().__init__(server)
        self.bind_publishing()

    def bind_publishing(self) -> None:
        self._path = self.publish_path()[0]
        self.parser.route_pubs_to(self._traced_pub, skip_unrouted=False)

    def _in(self, op: str) -> None:
        log.log(TRACE, "%s - <<- [%s]", self.describe(), op)

    def _log_payload(self) -> None:
        payload, self._unlogged = self._unlogged, None
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

    def _received(self, op: str, payload: bytes) -> None:
        """A message's operation logged, and its payload: now, or with an account that
        maps subjects, once its subject is (mapped())."""
        self._in(op)
        self._unlogged = payload
        if self.account.mappings is None:
            self._log_payload()

    def _traced_pub(self, subject: bytes, reply: bytes | None, payload: bytes) -> None:
        self._received(f"PUB {_head(subject, reply)} {len(payload)}", payload)
        self._path(subject, reply, payload)

    def on_hpub(self, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes) -> None:
        self._received(f"HPUB {_head(subject, reply)} {hdr_len} {len(data)}", data)
        super().on_hpub(subject, reply, hdr_len, data)
        self._log_payload()  # (a message dropped before it was mapped: its trace refused)

    def mapped(self, subject: bytes, trace: MsgTrace | None = None) -> bytes:
        to = super().mapped(subject, trace)
        self._log_payload()
        return to

    def mapping_applied(self, subject: bytes, to: bytes, trace: MsgTrace | None) -> None:
        self._in(f"MAPPING {subject.decode('utf-8', 'replace')} -> "
                 f"{to.decode('utf-8', 'replace')}")
        super().mapping_applied(subject, to, trace)

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


def _head(subject: bytes, reply: bytes | None) -> str:
    return b" ".join(x for x in (subject, reply) if x).decode("utf-8", "replace")


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
            frame = plain_frame.frame()
        head, tail, big, size = frame
        line = (head + sub.sid_sp + tail).split(b"\r\n", 1)
        payload = big if big is not None else line[1][:-2] if len(line) > 1 else b""
        name = client.describe() if hasattr(client, "describe") else f"cid:{client.cid}"
        log.log(TRACE, "%s - ->> [%s]", name, line[0].decode("utf-8", "replace"))
        log.log(TRACE, '%s - ->> MSG_PAYLOAD: ["%s"]', name, payload.decode("utf-8", "replace"))
        return True

    return deliver_traced
