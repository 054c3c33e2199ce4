#!/usr/bin/env python3
"""Spark connector figures: batch-read throughput and end-to-end latency of one message.

1. Throughput: fills a channel with N messages (default 1,000,000 of 100 bytes, published
   with PubAcks; the fill rate, messages stored per second, is the server's streaming publish
   rate, printed beside the read figure), then reads it with `spark.read.format("nats")` on
   `local[2]` (`count(*)`, `sum(length(data))`, `max(sequence)`, so every row and payload
   reaches the JVM) several times; only the read is timed. The first read of a fresh session
   is reported apart (the JVM compiles the read path during it, Python workers start); the
   figure is the median of the runs after it. Target: >= 1,000,000 rows/s.
2. Latency: a processingTime streaming query copies channel `lat.in` to the core subject
   `lat.out` (`target=core`); one message at a time is published with its send time and the
   time it arrives on `lat.out` is taken. Reports median / p90 / max. Target: median <= 1 s.

Starts its own tidings server (streaming on the memory store) unless --url is given. Against a
tidings server the read uses the bulk range fetch (a tidings extension); `-o fetch=false`
measures the standard subscription read instead (what a reference server gets).

    python benchmarks/spark_read.py [--messages N] [--size BYTES] [--runs R] [--json FILE]
    python benchmarks/spark_read.py --quick          # 200,000 messages, 10 latency samples
    python benchmarks/spark_read.py -o fetch=false   # the subscription read
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET_ROWS_PER_S = 1_000_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tidings", "server", "-a", "127.0.0.1",
                             "-p", str(port), "-q", "--max_msgs", "0", "--max_bytes", "0"])
    return proc, f"nats://127.0.0.1:{port}"


def fill(url: str, channel: str, n: int, size: int) -> float:
    """Publish n messages (PubAck'ed); returns the seconds it took."""
    from tidings.streaming import client as stan

    async def run() -> None:
        sc = await stan.connect("test-cluster", f"bench-fill-{uuid.uuid4().hex[:8]}", url=url,
                                max_pub_acks_inflight=65536)
        try:
            body = b"x" * size
            failed: list[Any] = []
            acked = [0]
            all_in = asyncio.Event()

            def on_ack(guid: str, err: Any) -> None:
                if err:
                    failed.append(err)
                acked[0] += 1
                if acked[0] == n:
                    all_in.set()

            for _ in range(n):
                await sc.publish_async(channel, body, ack_handler=on_ack)
            await all_in.wait()
            if failed:
                raise SystemExit(f"{len(failed)} publishes failed: {failed[0]}")
        finally:
            await sc.close()

    began = time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - began


def session(master: str) -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import tidings.spark

    spark = (SparkSession.builder.master(master).appName("tidings-spark-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    tidings.spark.register(spark)
    return spark


def throughput(spark: Any, url: str, source: dict[str, str], n: int, runs: int,
               options: dict[str, str]) -> dict[str, Any]:
    """`runs` timed reads after a first of `source` (`{"channels": ...}` or
    `{"streams": ...}`), which holds sequences 1..n."""
    df = (spark.read.format("nats").option("url", url).options(**source)
          .options(**options).load())
    parts = df.rdd.getNumPartitions()
    figures = []
    first = 0.0
    for i in range(runs + 1):
        began = time.perf_counter()
        row = df.selectExpr("count(*) as n", "sum(length(data)) as bytes",
                            "max(sequence) as last").collect()[0]
        took = time.perf_counter() - began
        if row.n != n or row.last != n:
            raise SystemExit(f"read {row.n} rows (last sequence {row.last}), expected {n}")
        rate = n / took
        print(f"  {'first read' if i == 0 else f'run {i}'}: {took:.2f} s, {rate:,.0f} rows/s",
              flush=True)
        if i:
            figures.append(rate)
        else:
            first = rate
    return {"messages": n, "partitions": parts, "first_read_rows_per_s": round(first),
            "runs_rows_per_s": [round(f) for f in figures],
            "median_rows_per_s": round(statistics.median(figures)),
            "best_rows_per_s": round(max(figures)), "target_rows_per_s": TARGET_ROWS_PER_S}


def latency(spark: Any, url: str, samples: int, trigger: str, tmp: Path) -> dict[str, Any]:
    from tidings.client import connect
    from tidings.streaming import client as stan

    tag = uuid.uuid4().hex[:8]
    src, out = f"lat.{tag}.in", f"lat.{tag}.out"
    query = (spark.readStream.format("nats").option("url", url).option("channels", src)
             .option("startingOffsets", "latest").load()
             .selectExpr(f"'{out}' as subject", "data")
             .writeStream.format("nats").option("url", url).option("target", "core")
             .option("checkpointLocation", str(tmp / f"lat-{tag}"))
             .trigger(processingTime=trigger).start())
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    arrivals: dict[int, float] = {}
    got = threading.Condition()

    async def on_msg(msg: Any) -> None:
        with got:
            arrivals[int(msg.data)] = time.perf_counter()
            got.notify_all()

    nc = run(connect(url))
    run(nc.subscribe(out, cb=on_msg))
    run(nc.flush())
    sc = run(stan.connect("test-cluster", f"bench-lat-{tag}", url=url))
    delays = []
    try:
        # The query's first micro-batch (planning, worker start) is not a steady state.
        while not query.recentProgress:
            query.awaitTermination(0.1)
        for i in range(samples + 2):
            sent = time.perf_counter()
            run(sc.publish(src, str(i).encode()))
            with got:
                if not got.wait_for(lambda i=i: i in arrivals, timeout=30):
                    raise SystemExit(f"message {i} did not come through the pipeline")
            if i >= 2:  # two warm-up messages
                delays.append(arrivals[i] - sent)
            print(f"  message {i}: {arrivals[i] - sent:.3f} s", flush=True)
            time.sleep(0.37)  # spread the samples over the trigger interval
    finally:
        query.stop()
        run(sc.close())
        run(nc.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    delays.sort()
    return {"samples": len(delays), "trigger": trigger,
            "median_s": round(statistics.median(delays), 3),
            "p90_s": round(delays[int(0.9 * (len(delays) - 1))], 3),
            "max_s": round(delays[-1], 3), "target_median_s": 1.0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running tidings (streaming) server; default: start one")
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100, help="payload bytes")
    ap.add_argument("--runs", type=int, default=5, help="timed reads after the first")
    ap.add_argument("--samples", type=int, default=20, help="latency samples")
    ap.add_argument("--trigger", default="100 milliseconds", help="latency query trigger")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("-o", "--option", action="append", metavar="KEY=VALUE",
                    help="extra read option (messagesPerPartition, maxInFlight, ...)")
    ap.add_argument("--quick", action="store_true", help="200,000 messages, 10 samples")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.quick:
        args.messages, args.samples, args.runs = 200_000, 10, 2
    options = dict(item.split("=", 1) for item in args.option or [])

    proc = None
    url = args.url
    if not url:
        proc, url = start_server()
    try:
        from tidings.spark.stan import wait_for_streaming

        wait_for_streaming(url, timeout=30.0)
        channel = f"bench.{uuid.uuid4().hex[:8]}"
        print(f"filling {channel} with {args.messages:,} messages of {args.size} bytes...",
              flush=True)
        took = fill(url, channel, args.messages, args.size)
        print(f"  {took:.1f} s ({args.messages / took:,.0f} msgs/s published)", flush=True)
        spark = session(args.master)
        print(f"batch read on {args.master}:", flush=True)
        results: dict[str, Any] = {
            "fill": {"messages": args.messages, "seconds": round(took, 2),
                     "msgs_per_s": round(args.messages / took)},
            "read": throughput(spark, url, {"channels": channel}, args.messages, args.runs,
                               options)}
        print(f"end-to-end latency ({args.trigger} trigger):", flush=True)
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            results["latency"] = latency(spark, url, args.samples, args.trigger, Path(tmp))
        spark.stop()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    r, lat, f = results["read"], results["latency"], results["fill"]
    met = r["median_rows_per_s"] >= TARGET_ROWS_PER_S
    print(f"\nbatch read: median {r['median_rows_per_s']:,} rows/s over {r['partitions']} "
          f"partitions (runs {min(r['runs_rows_per_s']):,}-{max(r['runs_rows_per_s']):,}; "
          f"first read of the session {r['first_read_rows_per_s']:,}) "
          f"(target >= {TARGET_ROWS_PER_S:,}): {'met' if met else 'NOT met'}")
    print(f"fill (streaming publish with PubAcks, one publisher): {f['msgs_per_s']:,} msgs/s")
    print(f"latency: median {lat['median_s']} s, p90 {lat['p90_s']} s, max {lat['max_s']} s "
          f"(target median <= 1 s): {'met' if lat['median_s'] <= 1.0 else 'NOT met'}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
