#!/usr/bin/env python3
"""Spark batch reads of a JetStream stream, from tidings and from nats-server in one run.

Starts both servers with JetStream on file storage, fills a stream (`allow_direct`, so ranges
are read with direct gets, the way the connector prefers) with N messages (default 1,000,000
of 100 bytes, published with PubAcks, a window of 1,024), then reads it with
`spark.read.format("nats").option("streams", ...)` on `local[2]` (`count(*)`,
`sum(length(data))`, `max(sequence)`: every row and payload reaches the JVM) several times.
The first read of each server is reported apart (Python workers start, the JVM compiles the
read path); the figure is the median of the runs after it; the ratio is tidings' over the
reference's. Target (issue 26): >= 1,000,000 rows/s from each.

    python benchmarks/spark_jetstream.py [--messages N] [--size BYTES] [--runs R] [--json FILE]
    python benchmarks/spark_jetstream.py --quick      # 200,000 messages, 2 runs
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.compare import REFERENCE, TIDINGS, jetstream_servers  # noqa: E402
from benchmarks.spark_read import session, throughput  # noqa: E402
from tidings.bench.jetstream import JsConn, publish  # noqa: E402
from tidings.bench.wire import Endpoint  # noqa: E402

TARGET_ROWS_PER_S = 1_000_000
STREAM = "SPARKBENCH"


def fill(port: int, n: int, size: int) -> float:
    conn = JsConn(Endpoint("127.0.0.1", port), "fill", 30)
    try:
        conn.api(f"STREAM.CREATE.{STREAM}", {"name": STREAM, "subjects": ["bench.>"],
                                             "storage": "file", "allow_direct": True})
        began = time.perf_counter()
        done = publish(conn, "bench.x", size, n, 1024, 0)
        took = time.perf_counter() - began
        if done.acked != n:
            raise SystemExit(f"{done.acked} of {n} messages acknowledged ({done.first_error})")
        return took
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.runs = 200_000, 2
    spark = session(args.master)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for server in jetstream_servers(Path(tmp)):
            server.start()
            try:
                port = server.endpoint.port
                took = fill(port, args.messages, args.size)
                print(f"  {server.name}: {args.messages:,} messages of {args.size} B stored "
                      f"in {took:.1f} s ({args.messages / took:,.0f}/s)", flush=True)
                results[server.name] = throughput(spark, f"nats://127.0.0.1:{port}",
                                                  {"streams": STREAM}, args.messages,
                                                  args.runs, {})
            finally:
                server.stop()
    spark.stop()
    ref, tid = results[REFERENCE], results[TIDINGS]
    print(f"\nSpark batch read of a JetStream stream, {args.messages:,} x {args.size} B, "
          f"{args.master}, direct gets:")
    print(f"{'server':<10} {'first read':>14} {'median':>14} {'partitions':>11}")
    for kind in (REFERENCE, TIDINGS):
        r = results[kind]
        print(f"{kind:<10} {r['first_read_rows_per_s']:>14,} {r['median_rows_per_s']:>14,} "
              f"{r['partitions']:>11}")
    ratio = tid["median_rows_per_s"] / ref["median_rows_per_s"]
    print(f"ratio tidings/reference {ratio:.2f}; target >= {TARGET_ROWS_PER_S:,} rows/s each")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "ratio": ratio}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
