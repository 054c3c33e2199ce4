"""A port nobody listens on, held for as long as a test needs it (the harness's one use of a
port chosen before a start: a URL that must be refused)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def refused_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port on `host` where connections are refused while the block runs: a socket binds
    it without listening, so no other program can take it meanwhile."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        yield int(sock.getsockname()[1])
