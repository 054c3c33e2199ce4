"""Unique identifiers for inboxes: a random 12-character prefix and a 10-character sequence."""

from __future__ import annotations

import secrets

_DIGITS = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_BASE = 62
_PREFIX_LEN = 12
_SEQ_LEN = 10
_MAX_SEQ = _BASE**_SEQ_LEN
_MIN_INC, _MAX_INC = 33, 333


class NUID:
    """22-character base62 ids, unique per process with overwhelming probability.

    The prefix is re-drawn from `secrets` whenever the sequence wraps, as in the NATS clients.
    """

    def __init__(self) -> None:
        self._prefix = b""
        self._seq = 0
        self._inc = 0
        self._reset()

    def _reset(self) -> None:
        self._prefix = bytes(secrets.choice(_DIGITS) for _ in range(_PREFIX_LEN))
        self._seq = secrets.randbelow(_MAX_SEQ)
        self._inc = _MIN_INC + secrets.randbelow(_MAX_INC - _MIN_INC)

    def next(self) -> bytes:
        self._seq += self._inc
        if self._seq >= _MAX_SEQ:
            self._reset()
        n = self._seq
        out = bytearray(_SEQ_LEN)
        for i in range(_SEQ_LEN - 1, -1, -1):
            n, r = divmod(n, _BASE)
            out[i] = _DIGITS[r]
        return self._prefix + bytes(out)
