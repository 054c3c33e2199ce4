"""A core subscriber on `>` that stops reading must not hold up streaming PubAcks.

The PubAcks travel through the same core server as the stuck subscriber's copies of every
message; flow control may slow the streaming server's connection for a few milliseconds at a
time, never for the write deadline.
"""

from __future__ import annotations

import asyncio
import socket
import time

from tidings.config.server import ServerOptions
from tidings.server.server import Server

from .conftest import StanFactory

MIB = 1024 * 1024


async def test_stuck_wildcard_subscriber_does_not_hold_pubacks(stan: StanFactory) -> None:
    core = Server(ServerOptions(host="127.0.0.1", port=0, no_log=True, max_pending=MIB))
    await core.start()
    stuck = socket.socket()
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    env = await stan(nats_url=f"nats://127.0.0.1:{core.port}")
    try:
        stuck.connect(("127.0.0.1", core.port))
        stuck.sendall(b'CONNECT {"verbose":false}\r\nSUB > 1\r\n')
        sc = await env.connect("publisher")
        acks: list[float] = []
        errors: list[str] = []

        def on_ack(guid: str, error: str | None) -> None:
            acks.append(time.monotonic())
            if error:
                errors.append(error)

        payload = b"x" * 1024
        start = time.monotonic()
        for _ in range(4096):  # 4 MiB: far past the stuck subscriber's max_pending
            await sc.publish_async("flood", payload, on_ack)
        await asyncio.wait_for(sc.wait_pub_acks(), 30)
        assert not errors
        assert len(acks) == 4096
        gaps = [b - a for a, b in zip([start] + acks, acks, strict=False)]
        # A stall used to last the write deadline (10 s) and held every PubAck meanwhile.
        assert max(gaps) < 5, f"PubAcks stopped for {max(gaps):.1f} s"
    finally:
        stuck.close()
        await env.close()  # before its core server goes
        await core.shutdown()
