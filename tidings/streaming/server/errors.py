"""The error strings of the streaming protocol, as the reference server sends them.

They travel in the ``error`` field of ConnectResponse, PubAck, SubscriptionResponse and
CloseResponse (and PingResponse for :data:`PING_CLIENT_REPLACED`). And the error a
streaming server that cannot start as configured raises (:class:`CannotStart`).
"""

from __future__ import annotations


class CannotStart(RuntimeError):
    """The streaming server cannot start where it was asked to (its subjects are taken):
    the user's to fix, reported as one line."""


ERR_INVALID_SUBJECT = "stan: invalid subject"
ERR_INVALID_START = "stan: invalid start position"
ERR_INVALID_SUB = "stan: invalid subscription"
ERR_INVALID_CLIENT = "stan: clientID already registered"
ERR_MISSING_CLIENT = "stan: clientID missing"
ERR_INVALID_CLIENT_ID = (
    "stan: invalid clientID: only alphanumeric and `-` or `_` characters allowed"
)
ERR_INVALID_ACK_WAIT = "stan: invalid ack wait time, should be >= 1s"
ERR_INVALID_MAX_INFLIGHT = "stan: invalid MaxInflight, should be >= 1"
ERR_INVALID_CONN_REQ = "stan: invalid connection request"
ERR_INVALID_PUB_REQ = "stan: invalid publish request"
ERR_INVALID_SUB_REQ = "stan: invalid subscription request"
ERR_INVALID_UNSUB_REQ = "stan: invalid unsubscribe request"
ERR_INVALID_CLOSE_REQ = "stan: invalid close request"
ERR_DUP_DURABLE = "stan: duplicate durable registration"
ERR_INVALID_DUR_NAME = (
    "stan: durable name of a durable queue subscriber can't contain the character ':'"
)
ERR_UNKNOWN_CLIENT = "stan: unknown clientID"
ERR_UNKNOWN_CHANNEL = "stan: unknown channel"

PING_CLIENT_REPLACED = "client has been replaced or is no longer registered"

ALL_ERRORS = (
    ERR_INVALID_SUBJECT,
    ERR_INVALID_START,
    ERR_INVALID_SUB,
    ERR_INVALID_CLIENT,
    ERR_MISSING_CLIENT,
    ERR_INVALID_CLIENT_ID,
    ERR_INVALID_ACK_WAIT,
    ERR_INVALID_MAX_INFLIGHT,
    ERR_INVALID_CONN_REQ,
    ERR_INVALID_PUB_REQ,
    ERR_INVALID_SUB_REQ,
    ERR_INVALID_UNSUB_REQ,
    ERR_INVALID_CLOSE_REQ,
    ERR_DUP_DURABLE,
    ERR_INVALID_DUR_NAME,
    ERR_UNKNOWN_CLIENT,
    ERR_UNKNOWN_CHANNEL,
)


class StreamingError(Exception):
    """A request failed with one of the protocol's error strings."""
