#!/usr/bin/env python3
"""`tidings streaming migrate` throughput: N messages of SIZE bytes from a NATS Streaming
source into a file-storage stream on tidings -js and on the reference nats-server -js.

    python benchmarks/migrate.py [--msgs 100000] [--size 100] [--runs 3]

Sources: a running tidings streaming server (memory store, read over the streaming protocol)
and a tidings file store directory. Each run is the `tidings` command in a process of its
own into a fresh target; the figure is the command's own (messages over the copy's time,
without start-up and planning), the best of the runs; the wall time of the whole command and
its CPU time per message (start-up included) are shown beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable from a checkout
    sys.path.insert(0, str(ROOT))

from tests.harness import start_reference, start_tidings  # noqa: E402
from tidings.streaming.client import connect as stan_connect  # noqa: E402

RATE = re.compile(r"^(\d+) message\(s\) in [\d.]+ s \(([\d,]+) msgs/s\)", re.MULTILINE)


async def fill(url: str, n: int, size: int) -> None:
    sc = await stan_connect("test-cluster", "bench-fill", url=url)
    payload = b"x" * size
    for _ in range(n):
        await sc.publish_async("bench", payload)
    await sc.wait_pub_acks()
    await sc.close()


def migrate(source: list[str], to: str) -> tuple[int, float, float]:
    """(msgs/s of the copy, wall seconds of the command, CPU µs per message of the command)"""
    cmd = [sys.executable, "-m", "tidings", "streaming", "migrate", *source, "--to", to,
           "--no-progress"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = RATE.search(out)
    assert m, out
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return int(m.group(2).replace(",", "")), wall, cpu * 1e6 / max(int(m.group(1)), 1)


def target(kind: str) -> object:
    start = start_tidings if kind == "tidings" else start_reference
    return start(extra_args=["-js", "-sd", tempfile.mkdtemp(prefix="bench-js-")],
                 **({"streaming": False} if kind == "tidings" else {}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--msgs", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    live = start_tidings(extra_args=["-m", "-1"])
    store = Path(tempfile.mkdtemp(prefix="bench-stan-")) / "data"
    filler = start_tidings(extra_args=["--store", "file", "--dir", str(store)])
    try:
        asyncio.run(fill(live.url, args.msgs, args.size))
        asyncio.run(fill(filler.url, args.msgs, args.size))
    finally:
        filler.stop()
    sources = {"running server": ["--url", live.url, "--monitor",
                                  f"http://127.0.0.1:{live.ports['http']}"],
               "file store dir": ["--dir", str(store)]}
    print(f"{args.msgs:,} messages of {args.size} B, best of {args.runs}")
    print(f"{'source':<16} {'target':<11} {'msgs/s':>10} {'wall s':>8} {'cpu us/msg':>11}")
    try:
        for name, source in sources.items():
            for kind in ("tidings", "reference"):
                best = (0, 0.0, 0.0)
                for _ in range(args.runs):
                    srv = target(kind)
                    try:
                        best = max(best, migrate(source, srv.url))
                    finally:
                        srv.stop()  # type: ignore[attr-defined]
                label = "tidings" if kind == "tidings" else "nats-server"
                print(f"{name:<16} {label:<11} {best[0]:>10,} {best[1]:>8.2f} {best[2]:>11.1f}")
    finally:
        live.stop()


if __name__ == "__main__":
    main()
