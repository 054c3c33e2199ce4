"""A received message. Subject, reply and headers are decoded on first access, not on arrival."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..protocol.headers import DESCRIPTION_HDR, STATUS_HDR, Headers
from .errors import Error

if TYPE_CHECKING:
    from .client import Client

NO_RESPONDERS_PREFIX = b"NATS/1.0 503"


class MsgHeaders(Headers):
    """Headers of a received message.

    Multi-value and case-preserving like `Headers`; besides, `"Status"` and `"Description"` read
    the status line the way nats-py's header dict exposes them, and a plain dict compares equal
    when it holds the same last value per name.
    """

    __slots__ = ()

    def get(self, name: str, default: str | None = None) -> str | None:
        value = super().get(name)
        if value is not None:
            return value
        if self.status is not None:
            low = name.lower()
            if low == "status":
                return f"{self.status:03d}"
            if low == "description" and self.description:
                return self.description
        return default

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def to_dict(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.status is not None:
            out[STATUS_HDR] = f"{self.status:03d}"
            if self.description:
                out[DESCRIPTION_HDR] = self.description
        out.update(super().to_dict())
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping) and not isinstance(other, Headers):
            return self.to_dict() == dict(other)
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]


class Msg:
    """A message delivered to a subscription (or the reply to a request).

    `subject`, `reply`, `data` and `headers` as in nats-py; `headers` is None when the message
    has none, else a `MsgHeaders` (multi-value; `.status` / `.description` hold the status line).
    """

    __slots__ = ("_client", "_subject", "_reply", "data", "_hdr", "_headers", "_sid", "_subj_s")

    def __init__(
        self,
        client: Client | None,
        subject: bytes,
        reply: bytes | None,
        data: bytes,
        hdr: bytes | None = None,
        sid: int = 0,
    ) -> None:
        self._client = client
        self._subject = subject
        self._reply = reply
        self.data = data
        self._hdr = hdr
        self._headers: MsgHeaders | None = None
        self._sid = sid
        self._subj_s: str | None = None

    @classmethod
    def make(
        cls,
        subject: str = "",
        reply: str = "",
        data: bytes = b"",
        headers: Mapping[str, Any] | None = None,
        client: Client | None = None,
    ) -> Msg:
        """Build a message by hand (tests, fakes), with decoded fields."""
        msg = cls(client, subject.encode(), reply.encode() or None, data)
        if headers is not None:
            msg._headers = MsgHeaders(headers)
            msg._hdr = b""
        return msg

    @property
    def subject(self) -> str:
        s = self._subj_s
        if s is None:
            s = self._subj_s = self._subject.decode(errors="replace")
        return s

    @property
    def reply(self) -> str:
        r = self._reply
        return r.decode(errors="replace") if r else ""

    @property
    def headers(self) -> MsgHeaders | None:
        if self._hdr is None:
            return None
        h = self._headers
        if h is None:
            h = MsgHeaders.decode(self._hdr)  # type: ignore[assignment]
            self._headers = h
        return h

    @property
    def header(self) -> MsgHeaders | None:
        """nats-py's older name for `headers`."""
        return self.headers

    @property
    def sid(self) -> int:
        return self._sid

    @property
    def is_no_responders(self) -> bool:
        """True for the server's 503 status reply to a request nobody listens to."""
        hdr = self._hdr
        return hdr is not None and not self.data and hdr.startswith(NO_RESPONDERS_PREFIX)

    async def respond(self, data: bytes = b"", headers: Mapping[str, Any] | None = None) -> None:
        """Publish `data` to this message's reply subject.

        Unlike nats-py, the request's headers are not copied into the response.
        """
        if not self._reply:
            raise Error("no reply subject available")
        if self._client is None:
            raise Error("client not set")
        client = self._client
        if client._publish_raw(self._reply, b"", data, headers):
            await client._soft_limit()

    def __repr__(self) -> str:
        return f"<Msg: subject={self.subject!r} reply={self.reply!r} data={self.data[:40]!r}...>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Msg):
            return NotImplemented
        return (self.subject, self.reply, self.data, self.headers) == (
            other.subject,
            other.reply,
            other.data,
            other.headers,
        )

    __hash__ = object.__hash__
