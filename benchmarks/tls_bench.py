#!/usr/bin/env python3
"""The TLS row of `make bench`: publish → subscribe throughput over TLS, tidings against the
reference nats-server, each started on the same configuration file (a `tls { }` block with
certificates made for the run).

The shared load generator speaks no TLS, so the load is a small asyncio client of its own:
one publisher writing 16-byte PUBs as fast as the socket takes them, one subscriber counting
the MSG frames it receives (by their bytes: every frame has the same size), both upgrading
to TLS after INFO as the official clients do. The figure is messages received per second
over the run; runs alternate between the servers, the median counts.

    python benchmarks/tls_bench.py [--duration S] [--repeat N]
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable from a checkout
    sys.path.insert(0, str(ROOT))

from tests.harness import Server, start_configured  # noqa: E402

SUBJECT = b"tls.bench"
PAYLOAD = b"x" * 16
PUB = b"PUB %s %d\r\n%s\r\n" % (SUBJECT, len(PAYLOAD), PAYLOAD)
MSG_SIZE = len(b"MSG %s 1 %d\r\n%s\r\n" % (SUBJECT, len(PAYLOAD), PAYLOAD))
BATCH = PUB * 2048


def make_certs(d: Path) -> tuple[str, str, str]:
    import trustme

    ca = trustme.CA()
    ca.cert_pem.write_to_path(d / "ca.pem")
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.cert_chain_pems[0].write_to_path(d / "server.pem")
    cert.private_key_pem.write_to_path(d / "server-key.pem")
    return str(d / "ca.pem"), str(d / "server.pem"), str(d / "server-key.pem")


def start(kind: str, cert: str, key: str) -> Server:
    return start_configured(kind, f'tls {{\n  cert_file: "{cert}"\n  key_file: "{key}"\n}}\n')


async def open_tls(port: int, ctx: ssl.SSLContext) -> tuple[asyncio.StreamReader,
                                                             asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
    await reader.readline()  # INFO in the clear, then TLS
    await writer.start_tls(ctx, server_hostname="127.0.0.1")
    writer.write(b'CONNECT {"verbose":false,"pedantic":false,"tls_required":true}\r\nPING\r\n')
    assert await reader.readline() == b"PONG\r\n"
    return reader, writer


async def one_run(port: int, ctx: ssl.SSLContext, duration: float) -> float:
    """Messages per second the subscriber received over `duration` (after a short start)."""
    sub_r, sub_w = await open_tls(port, ctx)
    sub_w.write(b"SUB %s 1\r\nPING\r\n" % SUBJECT)
    assert await sub_r.readline() == b"PONG\r\n"
    pub_r, pub_w = await open_tls(port, ctx)
    stop = False

    async def publish() -> None:
        while not stop:
            pub_w.write(BATCH)
            await pub_w.drain()

    received = 0

    async def receive() -> None:
        nonlocal received
        while True:
            chunk = await sub_r.read(1 << 20)
            if not chunk:
                return
            received += len(chunk)

    tasks = [asyncio.ensure_future(publish()), asyncio.ensure_future(receive())]
    await asyncio.sleep(0.3)  # past the start
    start_bytes, started = received, time.perf_counter()
    await asyncio.sleep(duration)
    got, elapsed = received - start_bytes, time.perf_counter() - started
    stop = True
    for w in (pub_w, sub_w):
        w.close()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return got / MSG_SIZE / elapsed


def measure(duration: float = 2.0, repeat: int = 3) -> dict[str, float]:
    """The median msgs/s of each server over TLS: {"reference": ..., "tidings": ...}."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as tmp:
        d = Path(tmp)
        ca, cert, key = make_certs(d)
        ctx = ssl.create_default_context(cafile=ca)
        servers = {kind: start(kind, cert, key) for kind in ("reference", "tidings")}
        figures: dict[str, list[float]] = {kind: [] for kind in servers}
        try:
            for _ in range(repeat):
                for kind, server in servers.items():  # A/B/A/B
                    figures[kind].append(asyncio.run(one_run(server.port, ctx, duration)))
        finally:
            for server in servers.values():
                server.stop()
    return {kind: statistics.median(values) for kind, values in figures.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=2.0)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    result = measure(args.duration, args.repeat)
    ref, tid = result["reference"], result["tidings"]
    print(f"pub→sub over TLS (16 B): reference {ref:,.0f} msgs/s, tidings {tid:,.0f} msgs/s, "
          f"ratio {tid / ref:.2f}")


if __name__ == "__main__":
    main()
