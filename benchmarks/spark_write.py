#!/usr/bin/env python3
"""Spark connector figure: batch writes to a streaming channel, confirmed by PubAcks.

Writes N rows (default 1,000,000 of 100 bytes, from a cached DataFrame in 2 partitions) with
`df.write.format("nats")` on `local[2]` to channels of a tidings server it starts (memory
store), a warm-up run and then several timed runs, each to fresh channels; checks that every
row was stored. Beside it, the ceiling: what the same server stores from one raw-socket
publisher (`tidings bench --workloads stan-pub`), measured in the same run. Target: write
>= 100,000 rows/s.

    python benchmarks/spark_write.py [--rows N] [--size BYTES] [--runs R] [--json FILE]
    python benchmarks/spark_write.py --quick        # 200,000 rows, 2 runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spark_read import session, start_server

TARGET = 100_000


def ceiling(url: str, n: int, size: int) -> float:
    """Messages/s the server stores from the streaming bench's publisher."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, "-m", "tidings", "bench", "--url", url,
                        "--workloads", "stan-pub", "--sizes", str(size), "--msgs", str(n),
                        "--json", out.name], check=True, stdout=subprocess.DEVNULL)
        doc = json.loads(Path(out.name).read_text())
    return float(next(r for r in doc["results"] if r["workload"] == "stan-pub")["msgs_per_s"])


def stored(url: str, channels: list[str]) -> int:
    from tidings.spark.catalog import ChannelCatalog
    from tidings.spark.options import ConnectionOptions

    catalog = ChannelCatalog(ConnectionOptions.parse({"url": url}))
    try:
        return sum(ci.last - ci.first + 1 for ci in catalog.info(channels).values() if ci)
    finally:
        catalog.close()


def throughput(spark: Any, url: str, n: int, size: int, runs: int) -> dict[str, Any]:
    rows = (spark.range(n).selectExpr("cast(id % 2 as string) as half",
                                      f"unbase64(base64(repeat('x', {size}))) as data")
            .repartition(2).cache())
    rows.count()
    figures = []
    for i in range(runs + 1):
        channels = [f"write.{i}.{half}.{time.time_ns()}" for half in (0, 1)]
        frame = rows.selectExpr(
            f"if(half = '0', '{channels[0]}', '{channels[1]}') as subject", "data")
        began = time.perf_counter()
        frame.write.format("nats").mode("append").option("url", url).save()
        took = time.perf_counter() - began
        got = stored(url, channels)
        if got != n:
            raise SystemExit(f"{got} rows stored, expected {n}")
        rate = n / took
        print(f"  {'warm-up' if i == 0 else f'run {i}'}: {took:.2f} s, {rate:,.0f} rows/s",
              flush=True)
        if i:
            figures.append(rate)
    rows.unpersist()
    return {"rows": n, "runs_rows_per_s": [round(f) for f in figures],
            "median_rows_per_s": round(statistics.median(figures)),
            "best_rows_per_s": round(max(figures)), "target_rows_per_s": TARGET}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100, help="payload bytes")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--quick", action="store_true", help="200,000 rows, 2 runs")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.runs = 200_000, 2
    proc, url = start_server()
    try:
        from tidings.spark.stan import wait_for_streaming

        wait_for_streaming(url, timeout=30.0)
        spark = session(args.master)
        print(f"batch write of {args.rows:,} rows of {args.size} bytes on {args.master}:",
              flush=True)
        result = throughput(spark, url, args.rows, args.size, args.runs)
        spark.stop()
        print("ceiling: the streaming bench's publisher on the same server...", flush=True)
        result["ceiling_msgs_per_s"] = round(ceiling(url, min(args.rows, 500_000), args.size))
    finally:
        proc.terminate()
        proc.wait(10)
    median, top = result["median_rows_per_s"], result["ceiling_msgs_per_s"]
    print(f"\nbatch write: median {median:,} rows/s; the server stores {top:,} msgs/s from "
          f"one streaming bench publisher ({median / top:.2f} of it); target >= {TARGET:,}: "
          f"{'met' if median >= TARGET else 'NOT met'}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
