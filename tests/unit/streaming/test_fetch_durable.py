"""The bulk range fetch hands out only durable messages (a sync may still roll back others)."""

from __future__ import annotations

import json

from tidings.streaming.server.fetch import HEADER, handle_fetch
from tidings.streaming.stores import open_store


def test_fetch_stops_at_the_last_durable_message() -> None:
    store = open_store("memory")
    store.store_msgs("foo", [("", b"m%d" % i) for i in range(1, 6)])
    req = json.dumps({"channel": "foo", "start": 1, "end": 100}).encode()
    reply = handle_fetch(store, req, 1 << 20, lambda channel: 3)
    _, status, count, _, first, last, nxt = HEADER.unpack_from(reply)
    assert (status, count, first, last, nxt) == (0, 3, 1, 3, 4)
    assert reply.endswith(b"m1m2m3")
