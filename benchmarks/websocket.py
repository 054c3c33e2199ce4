#!/usr/bin/env python3
"""pub→sub over WebSocket: the reference nats-server against tidings, alternating (A/B/A/B).

Both servers start from the same configuration (`websocket { no_tls: true }`). A publisher
and a subscriber, each a raw WebSocket client (aiohttp), run over ws://: the publisher sends
PUBs in batches of one WebSocket message each, the subscriber counts the MSG bytes that
arrive. The figure is messages per second from the first PUB to the last MSG received; the
median of the repeats counts.

    python benchmarks/websocket.py [--count N] [--repeat R] [--sizes 16,128,1024]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable from a checkout
    sys.path.insert(0, str(ROOT))

from tests.harness import Server, start_configured  # noqa: E402


def start(kind: str) -> tuple[Server, int]:
    """A server of `kind` with a plain WebSocket listener: (the server, its ws port)."""
    server = start_configured(kind, "websocket { listen: 127.0.0.1:-1, no_tls: true }\n")
    return server, server.ports["websocket"]


async def _handshake(ws: aiohttp.ClientWebSocketResponse, extra: bytes = b"") -> None:
    await ws.receive()  # INFO
    await ws.send_bytes(b'CONNECT {"verbose":false,"pedantic":false}\r\n' + extra + b"PING\r\n")
    got = b""
    while b"PONG\r\n" not in got:
        got += (await ws.receive()).data


async def pubsub(ws_port: int, size: int, count: int, batch: int = 500) -> float:
    """Messages per second through the server, publisher and subscriber both over ws://."""
    url = f"ws://127.0.0.1:{ws_port}"
    payload = b"x" * size
    pub_frame = b"PUB bench %d\r\n%b\r\n" % (size, payload)
    msg_len = len(b"MSG bench 1 %d\r\n%b\r\n" % (size, payload))
    async with aiohttp.ClientSession() as session:
        sub = await session.ws_connect(url, max_msg_size=0)
        pub = await session.ws_connect(url, max_msg_size=0)
        await _handshake(sub, b"SUB bench 1\r\n")
        await _handshake(pub)

        async def receive() -> None:
            want, got = count * msg_len, 0
            while got < want:
                msg = await sub.receive()
                if msg.type != aiohttp.WSMsgType.BINARY:
                    raise RuntimeError(f"subscriber lost: {msg.type}")
                got += len(msg.data)

        reader = asyncio.ensure_future(receive())
        started = time.perf_counter()
        chunk = pub_frame * batch
        for _ in range(count // batch):
            await pub.send_bytes(chunk)
        await asyncio.wait_for(reader, 120)
        elapsed = time.perf_counter() - started
        await pub.close()
        await sub.close()
    return count / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="16,128,1024,16384")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[tuple[str, int], list[float]] = {}
    servers = {kind: start(kind) for kind in ("reference", "tidings")}
    try:
        for size in sizes:
            count = args.count if size <= 1024 else args.count // 10
            for _ in range(args.repeat):
                for kind, (_, ws_port) in servers.items():
                    rate = asyncio.run(pubsub(ws_port, size, count))
                    results.setdefault((kind, size), []).append(rate)
    finally:
        for server, _ in servers.values():
            server.stop()
    print(f"{'workload':<24}{'reference':>14}{'tidings':>14}{'ratio':>8}")
    for size in sizes:
        ref = statistics.median(results[("reference", size)])
        ours = statistics.median(results[("tidings", size)])
        print(f"{f'ws pub→sub {size} B':<24}{ref:>14,.0f}{ours:>14,.0f}{ours / ref:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
