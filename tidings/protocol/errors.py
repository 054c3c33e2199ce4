"""The -ERR strings the reference nats-server sends, and the exception the parsers raise."""

from __future__ import annotations

# Errors after which the reference server closes the connection.
UNKNOWN_PROTOCOL_OPERATION = "Unknown Protocol Operation"
MAX_PAYLOAD_VIOLATION = "Maximum Payload Violation"
MAX_CONTROL_LINE_EXCEEDED = "maximum control line exceeded"
MAX_CONNECTIONS_EXCEEDED = "maximum connections exceeded"
TOO_MANY_ACCOUNT_CONNECTIONS = "maximum account active connections exceeded"
MAX_SUBSCRIPTIONS_EXCEEDED = "maximum subscriptions exceeded"
USER_AUTHENTICATION_EXPIRED = "User Authentication Expired"
ACCOUNT_AUTHENTICATION_EXPIRED = "Account Authentication Expired"
USER_AUTHENTICATION_REVOKED = "User Authentication Revoked"
AUTHORIZATION_VIOLATION = "Authorization Violation"
AUTHENTICATION_TIMEOUT = "Authentication Timeout"
STALE_CONNECTION = "Stale Connection"
SLOW_CONSUMER = "Slow Consumer"
INVALID_CLIENT_PROTOCOL = "invalid client protocol"
NO_RESPONDERS_REQUIRES_HEADERS = "no responders requires headers support"
TLS_REQUIRED = "Secure Connection - TLS Required"

# Errors after which the connection stays open.
INVALID_SUBJECT = "Invalid Subject"
INVALID_PUBLISH_SUBJECT = "Invalid Publish Subject"


class ProtocolError(Exception):
    """A protocol violation found while parsing.

    `err` is the text to send back as `-ERR '<err>'`, or None when the reference server
    closes the connection without a word (e.g. a PUB with a missing size). Parsers raise
    this only for violations that end the connection.
    """

    def __init__(self, err: str | None, detail: str = "") -> None:
        super().__init__(detail or err or "protocol violation")
        self.err = err
