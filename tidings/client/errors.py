"""Client errors, named as nats-py names them so `except` clauses carry over unchanged.

Every error derives from `Error`. `TimeoutError` is also an `asyncio.TimeoutError` (the built-in
`TimeoutError` on Python 3.11+), so code that catches either keeps working.
"""

from __future__ import annotations

import asyncio
from typing import Any


class Error(Exception):
    """Base of every client error."""


class TimeoutError(Error, asyncio.TimeoutError):
    def __str__(self) -> str:
        return "nats: timeout"


class NoRespondersError(Error):
    def __str__(self) -> str:
        return "nats: no responders available for request"


class StaleConnectionError(Error):
    def __str__(self) -> str:
        return "nats: stale connection"


class UnexpectedEOF(StaleConnectionError):
    def __str__(self) -> str:
        return "nats: unexpected EOF"


class OutboundBufferLimitError(Error):
    def __str__(self) -> str:
        return "nats: outbound buffer limit exceeded"


class FlushTimeoutError(TimeoutError):
    def __str__(self) -> str:
        return "nats: flush timeout"


class DrainTimeoutError(TimeoutError):
    def __str__(self) -> str:
        return "nats: draining connection timed out"


class ConnectionClosedError(Error):
    def __str__(self) -> str:
        return "nats: connection closed"


class ConnectionDrainingError(Error):
    def __str__(self) -> str:
        return "nats: connection draining"


class ConnectionReconnectingError(Error):
    def __str__(self) -> str:
        return "nats: connection reconnecting"


class SecureConnRequiredError(Error):
    def __str__(self) -> str:
        return "nats: secure connection required"


class SecureConnWantedError(Error):
    def __str__(self) -> str:
        return "nats: secure connection not available"


class SecureConnFailedError(Error):
    def __str__(self) -> str:
        return "nats: secure connection failed"


class BadSubscriptionError(Error):
    def __str__(self) -> str:
        return "nats: invalid subscription"


class BadSubjectError(Error):
    def __str__(self) -> str:
        return "nats: invalid subject"


class BadHeaderError(Error):
    def __str__(self) -> str:
        return "nats: invalid header"


class BadTimeoutError(Error):
    def __str__(self) -> str:
        return "nats: timeout invalid"


class NoServersError(Error):
    def __str__(self) -> str:
        detail = f": {self.args[0]}" if self.args else ""
        return "nats: no servers available for connection" + detail


class MaxPayloadError(Error):
    def __str__(self) -> str:
        return "nats: maximum payload exceeded"


class InvalidUserCredentialsError(Error):
    def __str__(self) -> str:
        return "nats: invalid user credentials"


class InvalidCallbackTypeError(Error):
    def __str__(self) -> str:
        return "nats: callbacks must be coroutine functions"


class ProtocolError(Error):
    def __str__(self) -> str:
        detail = f": {self.args[0]}" if self.args else ""
        return "nats: protocol error" + detail


class ServerError(Error):
    """An `-ERR` from the server; `message` is its text without quotes."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"nats: {self.message}"


class AuthorizationError(ServerError):
    """`-ERR 'Authorization Violation'` (or another authentication failure)."""

    def __init__(self, message: str = "Authorization Violation") -> None:
        super().__init__(message)

    def __str__(self) -> str:
        return "nats: authorization failed"


class PermissionsError(ServerError):
    """`-ERR 'Permissions Violation ...'`: the connection stays open."""


class SlowConsumerError(Error):
    """A subscription dropped messages because its pending limits were exceeded."""

    def __init__(self, subject: str, reply: str, sid: int, sub: Any) -> None:
        super().__init__(subject)
        self.subject = subject
        self.reply = reply
        self.sid = sid
        self.sub = sub

    def __str__(self) -> str:
        return (
            f"nats: slow consumer, messages dropped subject: {self.subject}, sid: {self.sid}"
        )


def server_error(message: str) -> ServerError:
    """The typed error for the text of an `-ERR`."""
    low = message.lower()
    if "authorization violation" in low or "authentication" in low or "user authentication" in low:
        return AuthorizationError(message)
    if low.startswith("permissions violation"):
        return PermissionsError(message)
    if "stale connection" in low:
        return StaleConnectionSrvError(message)
    return ServerError(message)


class StaleConnectionSrvError(ServerError, StaleConnectionError):
    """`-ERR 'Stale Connection'`: the server gave up on our keep-alive."""

    def __str__(self) -> str:
        return "nats: stale connection"
