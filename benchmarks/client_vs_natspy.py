#!/usr/bin/env python3
"""tidings.client against nats-py, same server, same workloads, in one run.

Starts one server (the reference nats-server by default, or tidings), then runs each workload
with each client in turn (A/B/A/B...), and prints the median of the repeats, the ratio
tidings.client / nats-py and the target from issue 4:

  publish      128 B fire-and-forget publishes ending with flush()        target >= 2.0
  subscribe    128 B messages read with `async for msg in sub.messages`  target >= 2.0
               (sent by a raw-socket publisher in another process, the same for both)
  request      sequential request/reply round trips, 128 B, responder on a second
               connection of the same client library in the same process  target >= 1.5
  subscribe cb the same stream read by a callback                        (no target)

    python benchmarks/client_vs_natspy.py [--server reference|tidings] [--runs 5] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable from a checkout without installing the package
    sys.path.insert(0, str(ROOT))

import nats  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import tidings.client  # noqa: E402
from tests.harness import Server, start_reference, start_tidings  # noqa: E402

LIBS: dict[str, Any] = {"nats-py": nats, "tidings": tidings.client}
SUBJECT = "bench.client"

# A publisher with no client library: prebuilt PUB frames written as fast as the socket takes
# them, then a PING; it exits at the PONG. The same bytes for both subscribers.
RAW_PUBLISHER = r"""
import socket, sys
port, count, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")
f.readline()
s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
while f.readline() != b"PONG\r\n":
    pass
frame = b"PUB %s %d\r\n%s\r\n" % (sys.argv[4].encode(), size, b"x" * size)
batch = frame * 1000
for _ in range(count // 1000):
    s.sendall(batch)
s.sendall(frame * (count % 1000) + b"PING\r\n")
while f.readline() != b"PONG\r\n":
    pass
"""


async def bench_publish(lib: Any, url: str, count: int, size: int) -> float:
    nc = await lib.connect(url)
    payload = b"x" * size
    publish = nc.publish
    try:
        start = time.perf_counter()
        for _ in range(count):
            await publish(SUBJECT, payload)
        await nc.flush(timeout=60)
        return count / (time.perf_counter() - start)
    finally:
        await nc.close()


async def _run_publisher(port: int, count: int, size: int) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", RAW_PUBLISHER, str(port), str(count), str(size), SUBJECT
    )
    if await proc.wait() != 0:
        raise RuntimeError("raw publisher failed")


async def bench_subscribe(lib: Any, url: str, port: int, count: int, size: int) -> float:
    nc = await lib.connect(url)
    try:
        sub = await nc.subscribe(SUBJECT)
        await nc.flush()
        publisher = asyncio.ensure_future(_run_publisher(port, count, size))
        n = 0
        start = 0.0
        async for _msg in sub.messages:
            n += 1
            if n == 1:
                start = time.perf_counter()
            elif n == count:
                break
        elapsed = time.perf_counter() - start
        await publisher
        return (count - 1) / elapsed
    finally:
        await nc.close()


async def bench_subscribe_cb(lib: Any, url: str, port: int, count: int, size: int) -> float:
    nc = await lib.connect(url)
    done = asyncio.get_running_loop().create_future()
    state = {"n": 0, "start": 0.0}

    async def cb(_msg: Any) -> None:
        state["n"] += 1
        if state["n"] == 1:
            state["start"] = time.perf_counter()
        elif state["n"] == count and not done.done():
            done.set_result(time.perf_counter())

    try:
        await nc.subscribe(SUBJECT, cb=cb)
        await nc.flush()
        publisher = asyncio.ensure_future(_run_publisher(port, count, size))
        end = await done
        await publisher
        return (count - 1) / (end - state["start"])
    finally:
        await nc.close()


async def bench_request(lib: Any, url: str, count: int, size: int) -> float:
    requester = await lib.connect(url)
    responder = await lib.connect(url)
    payload = b"x" * size

    async def respond(msg: Any) -> None:
        await msg.respond(msg.data)

    try:
        await responder.subscribe(SUBJECT + ".svc", cb=respond)
        await responder.flush()
        # nats-py 2.16's flush() may send its PING ahead of the SUB still in its buffer, so
        # the first requests can find no responder yet: retry until one is answered.
        for _ in range(1000):
            try:
                await requester.request(SUBJECT + ".svc", payload, timeout=5)
                break
            except lib.errors.NoRespondersError:
                await asyncio.sleep(0.001)
        for _ in range(200):  # warm up
            await requester.request(SUBJECT + ".svc", payload, timeout=5)
        start = time.perf_counter()
        for _ in range(count):
            await requester.request(SUBJECT + ".svc", payload, timeout=5)
        return count / (time.perf_counter() - start)
    finally:
        await requester.close()
        await responder.close()


Workload = Callable[[Any], Awaitable[float]]


def workloads(server: Server, quick: bool) -> list[tuple[str, str, float | None, Workload]]:
    url, port = server.url, server.port
    scale = 5 if quick else 1
    n_pub, n_sub, n_req = 500_000 // scale, 200_000 // scale, 20_000 // scale
    return [
        ("publish 128 B", "msgs/s", 2.0, lambda lib: bench_publish(lib, url, n_pub, 128)),
        ("subscribe 128 B (iterator)", "msgs/s", 2.0,
         lambda lib: bench_subscribe(lib, url, port, n_sub, 128)),
        ("request/reply 128 B", "round trips/s", 1.5,
         lambda lib: bench_request(lib, url, n_req, 128)),
        ("subscribe 128 B (callback)", "msgs/s", None,
         lambda lib: bench_subscribe_cb(lib, url, port, n_sub, 128)),
    ]


async def run_all(server: Server, runs: int, quick: bool,
                  console: Console) -> list[dict[str, Any]]:
    rows = []
    for title, unit, target, work in workloads(server, quick):
        samples: dict[str, list[float]] = {name: [] for name in LIBS}
        for i in range(runs):
            order = list(LIBS.items()) if i % 2 == 0 else list(reversed(LIBS.items()))
            for name, lib in order:
                samples[name].append(await work(lib))
        ours = statistics.median(samples["tidings"])
        theirs = statistics.median(samples["nats-py"])
        ratio = ours / theirs
        rows.append({
            "workload": title, "unit": unit, "nats_py": theirs, "tidings": ours,
            "ratio": ratio, "target": target, "samples": samples,
            "passes": None if target is None else ratio >= target,
        })
        console.print(f"  {title}: nats-py {theirs:,.0f}, tidings {ours:,.0f} {unit}"
                      f" (x{ratio:.2f})")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", choices=("reference", "tidings"), default="reference")
    ap.add_argument("--runs", type=int, default=3, help="repeats per client (median counts)")
    ap.add_argument("--quick", action="store_true", help="a fifth of the messages")
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    ap.add_argument("--json", help="write the results to this file")
    args = ap.parse_args()

    console = Console()
    server = start_reference() if args.server == "reference" else start_tidings()
    try:
        console.print(f"server: {args.server} on {server.url}; loop: {args.loop}; "
                      f"runs: {args.runs}")
        if args.loop == "uvloop":
            import uvloop

            rows = uvloop.run(run_all(server, args.runs, args.quick, console))
        else:
            rows = asyncio.run(run_all(server, args.runs, args.quick, console))
    finally:
        server.stop()

    table = Table(title=f"tidings.client vs nats-py ({args.server} server, {args.loop})")
    for col in ("workload", "nats-py", "tidings.client", "ratio", "target", ""):
        table.add_column(col, justify="left" if col == "workload" else "right")
    for r in rows:
        target = "" if r["target"] is None else f">= {r['target']:.1f}"
        mark = "" if r["passes"] is None else ("ok" if r["passes"] else "MISS")
        table.add_row(r["workload"], f"{r['nats_py']:,.0f}", f"{r['tidings']:,.0f}",
                      f"{r['ratio']:.2f}", target, mark)
    console.print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"server": args.server, "loop": args.loop, "runs": args.runs, "rows": rows},
            indent=2))
    return 0 if all(r["passes"] in (None, True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
