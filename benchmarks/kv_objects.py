#!/usr/bin/env python3
"""Key-Value and Object store side by side: the reference nats-server against tidings, alternating.

Starts the reference (`nats-server -js -sd <tmp>`) and tidings (`tidings server -js -sd <tmp>
--no_streaming`) on free loopback ports, each with a store of its own, and measures with the
same client for both, file storage, 128 B values:

- KV put, one writer, each put awaited (its PubAck) before the next; and pipelined, at most
  256 puts outstanding. The keys cycle over 1,000 of a bucket created fresh for the run
  (history 1: each put past the first thousand replaces a key's value);
- KV get, each awaited: direct gets by last subject (`$JS.API.DIRECT.GET.KV_<b>.$KV.<b>.<key>`,
  as nats-py's kv.get sends them, KV buckets allowing direct gets), keys cycling over 1,000;
- a watch of a bucket holding 10,000 keys: from the consumer's creation (an ordered push
  consumer, last value per subject, as nats-py's kv.watchall makes it) until all 10,000
  initial values have arrived; watches one after the other for `--duration`, keys/s;
- an object put of 100 MiB through nats-py's object store (128 KiB chunks, each chunk's
  PubAck awaited), into a bucket made fresh for the run;
- an object get of 100 MiB: its chunks read through the consumer nats-py's get makes (an
  ordered push consumer with flow control), from the consumer's creation to the last chunk;
  reads one after the other for `--duration`, MiB/s.

The buckets and the object read are made by nats-py (the configuration a client gives them;
KV buckets with direct gets allowed, as `nats kv add` and the Go client make them). The KV
rows and the object get speak the same wire as nats-py (the same subjects and consumers) over
a raw socket of tidings/bench/jetstream.py: nats-py tops out at about 6,000 awaited puts or gets
per second with a core busy, and its object get at 50 MiB/s with both processes idle (it
answers each flow-control request some 0.2 s late), which would be the figures of both
servers. The per-run lines show the client's CPU (% of one core).

Prints the compare.py table (figures, ratio tidings/reference, the target of issue 25: 0.5 of
the reference each). `make bench` runs it after jetstream.py; `make bench-kv` alone.

    python benchmarks/kv_objects.py [--repeat N] [--duration S] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable from a checkout without installing the package
    sys.path.insert(0, str(ROOT))

import nats  # noqa: E402
from nats.errors import Error as NatsError  # noqa: E402
from nats.js import JetStreamContext  # noqa: E402
from nats.js.api import KeyValueConfig, StorageType  # noqa: E402
from nats.js.errors import BucketNotFoundError, NotFoundError  # noqa: E402
from rich.console import Console  # noqa: E402

from benchmarks.compare import (  # noqa: E402
    Check,
    Display,
    Run,
    Server,
    announce,
    fmt,
    guarded,
    jetstream_servers,
    judge,
    report,
    running,
    value_of,
)
from tidings.bench.jetstream import SID_ACKS, Frame, JsConn, JsError, windowed  # noqa: E402
from tidings.bench.procstat import CpuWindow  # noqa: E402
from tidings.bench.results import ThroughputResult  # noqa: E402
from tidings.bench.runner import Spec  # noqa: E402
from tidings.bench.settings import ProgressFn, no_progress  # noqa: E402
from tidings.bench.wire import ProtocolError, make_payload  # noqa: E402

SIZE = 128  # bytes of a KV value
KEYS = 1_000  # keys the put and get runs cycle over
WINDOW = 256  # puts outstanding at most, pipelined
TARGET = 0.5  # of the reference, each row (issue 25)
MIB = 1 << 20
PUT_BUCKET, GET_BUCKET, WATCH_BUCKET = "BENCH_PUT", "BENCH_GET", "BENCH_WATCH"
OBJ_PUT_BUCKET, OBJ_GET_BUCKET, OBJECT = "BENCH_OBJ_PUT", "BENCH_OBJ_GET", "big"
T = TypeVar("T")


@dataclass(frozen=True)
class Options:
    """What every run needs: how long, how many, how large."""

    duration: float = 2.0
    msgs: int = 1_000_000  # puts or gets per run at most
    watch_keys: int = 10_000
    object_mib: int = 100
    timeout: float = 30.0


def checks(opts: Options) -> tuple[Check, ...]:
    obj = opts.object_mib * MIB
    return (
        Check("KV put, each awaited 128 B", Spec("kv-put", SIZE), "msgs_per_s", "puts/s",
              TARGET),
        Check(f"KV put, pipelined ×{WINDOW} 128 B", Spec("kv-put-pipelined", SIZE),
              "msgs_per_s", "puts/s", TARGET),
        Check("KV get (direct), each awaited", Spec("kv-get", SIZE), "msgs_per_s", "gets/s",
              TARGET),
        Check(f"KV watch of {opts.watch_keys:,} keys", Spec("kv-watch", SIZE), "msgs_per_s",
              "keys/s", TARGET),
        Check(f"object put {opts.object_mib} MiB", Spec("obj-put", obj), "mib_per_s", "MiB/s",
              TARGET),
        Check(f"object get {opts.object_mib} MiB", Spec("obj-get", obj), "mib_per_s", "MiB/s",
              TARGET),
    )


# -- servers -----------------------------------------------------------------------------------

def servers(store: Path) -> tuple[Server, Server]:
    """The reference and tidings with JetStream, each on a store of its own."""
    return jetstream_servers(store)


# -- buckets (nats-py) -------------------------------------------------------------------------

async def _with_js(server: Server, body: Callable[[JetStreamContext], Awaitable[T]]) -> T:
    nc = await nats.connect(str(server.endpoint), connect_timeout=5, allow_reconnect=False)
    try:
        return await body(nc.jetstream(timeout=60))
    finally:
        await nc.close()


async def _kv_bucket(js: JetStreamContext, bucket: str, fresh: bool) -> bool:
    """The bucket exists (made anew with `fresh`); whether it was made now."""
    try:
        await js.key_value(bucket)
        if not fresh:
            return False
        await js.delete_key_value(bucket)
    except BucketNotFoundError:
        pass
    # direct: as `nats kv add` and the Go client make a bucket (nats-py leaves it off unless
    # asked, and its kv.get then asks for STREAM.MSG.GET instead of a direct get)
    await js.create_key_value(KeyValueConfig(bucket=bucket, storage=StorageType.FILE,
                                             direct=True))
    return True


def kv_bucket(server: Server, bucket: str, fresh: bool = False) -> bool:
    return asyncio.run(_with_js(server, lambda js: _kv_bucket(js, bucket, fresh)))


# -- KV over a raw socket ----------------------------------------------------------------------

@dataclass
class Answered:
    """Replies to the requests of one run: how many, how many refused, the first refusal."""

    ok: int = 0
    refused: int = 0
    first_refusal: str = ""


def put_frames(conn: JsConn, bucket: str, keys: int) -> list[bytes]:
    """A put of each key (a publish to $KV.<bucket>.<key>, its PubAck to the ack inbox)."""
    value = make_payload(SIZE)
    return [b"PUB $KV.%s.k%05d %s %d\r\n%s\r\n" % (bucket.encode(), i, conn.ack_inbox,
                                                  SIZE, value) for i in range(keys)]


def get_frames(conn: JsConn, bucket: str, keys: int) -> list[bytes]:
    """A direct get of each key's last value, as nats-py's kv.get sends it."""
    b = bucket.encode()
    return [b"PUB $JS.API.DIRECT.GET.KV_%s.$KV.%s.k%05d %s 0\r\n\r\n" % (b, b, i, conn.ack_inbox)
            for i in range(keys)]


def refusal_of_put(frame: Frame) -> str:
    _, _, headers, data = frame
    if headers.startswith(b"NATS/1.0 503"):
        return "no responders (no stream captures the subject)"
    return data.decode(errors="replace") if b'"error"' in data else ""


def refusal_of_get(frame: Frame) -> str:
    _, _, headers, data = frame
    status = headers.split(b"\r\n", 1)[0]
    if status != b"NATS/1.0" or len(data) != SIZE:
        return status.decode(errors="replace") or f"{len(data)} bytes, no headers"
    return ""


def requests(conn: JsConn, frames: list[bytes], window: int, msgs: int, duration: float,
             refusal: Callable[[Frame], str], progress: ProgressFn = no_progress) -> Answered:
    """Send `frames` in turn, at most `window` unanswered, until `msgs` are answered or
    `duration` (0: none) has passed; the answers of what was sent are awaited."""
    out = Answered()

    def take(frames: list[Frame]) -> int:
        answers = [f for f in frames if f[0] == SID_ACKS]
        for frame in answers:
            why = refusal(frame)
            out.ok += not why
            out.refused += bool(why)
            out.first_refusal = out.first_refusal or why
        return len(answers)

    windowed(conn, frames, window, msgs, duration, take,
             lambda done, _: progress(done, out.ok),
             lambda sent: f"no answer for {conn.timeout:.0f}s ({out.ok} of {sent})")
    return out


def fill(conn: JsConn, bucket: str, keys: int) -> None:
    """Put each of `keys` keys once (pipelined, not timed)."""
    done = requests(conn, put_frames(conn, bucket, keys), WINDOW, keys, 0.0, refusal_of_put)
    if done.refused:
        raise JsError(f"filling {bucket}: {done.refused} refused: {done.first_refusal[:200]}")


def kv_requests(server: Server, name: str, opts: Options, progress: ProgressFn
                ) -> ThroughputResult:
    """kv-put, kv-put-pipelined or kv-get: one run."""
    bucket = GET_BUCKET if name == "kv-get" else PUT_BUCKET
    made = kv_bucket(server, bucket, fresh=name != "kv-get")
    conn = JsConn(server.endpoint, f"kv-bench-{name}", opts.timeout)
    try:
        if name == "kv-get":
            if made:
                fill(conn, bucket, KEYS)
            frames, refusal = get_frames(conn, bucket, KEYS), refusal_of_get
        else:
            frames, refusal = put_frames(conn, bucket, KEYS), refusal_of_put
        window = CpuWindow(server.pid)
        window.start()
        done = requests(conn, frames, WINDOW if name == "kv-put-pipelined" else 1, opts.msgs,
                        opts.duration, refusal, progress)
        window.stop()
    finally:
        conn.close()
    result = timed(ThroughputResult(name, SIZE, 0, done.ok + done.refused, done.ok, 0.0),
                   window)
    if done.refused:
        result.errors.append(f"{done.refused} refused: {done.first_refusal[:200]}")
    return result


# -- push consumers: the watch and the object get -------------------------------------------

SID_PUSH = b"5"


def ordered_config(conn: JsConn, filter_subject: str, policy: str) -> dict[str, object]:
    """The consumer of nats-py's ordered subscriptions (kv.watchall's, the object get's)."""
    return {"deliver_subject": conn.push_inbox.decode(), "filter_subject": filter_subject,
            "deliver_policy": policy, "ack_policy": "none", "max_deliver": 1,
            "ack_wait": 22 * 3600 * 10**9, "flow_control": True, "idle_heartbeat": 5 * 10**9,
            "inactive_threshold": 300 * 10**9, "num_replicas": 1, "mem_storage": True}


def consume(conn: JsConn, stream: str, config: dict[str, object], count: int) -> int:
    """Create the push consumer and read until `count` messages have arrived, flow control
    answered at once; then delete it. The bytes of the messages' data."""
    got = size = 0
    moved = time.monotonic()
    info = conn.api(f"CONSUMER.CREATE.{stream}", {"stream_name": stream, "config": config})
    while got < count:
        frames = conn.read(0.05)
        for sid, reply, headers, data in frames:
            if sid != SID_PUSH:
                continue
            if headers.startswith(b"NATS/1.0 100"):  # a heartbeat, or flow control to answer
                if reply:
                    conn.send(b"PUB %s 0\r\n\r\n" % reply)
                continue
            got += 1
            size += len(data)
        if frames:
            moved = time.monotonic()
        elif time.monotonic() - moved > conn.timeout:
            raise JsError(f"{stream}: no message for {conn.timeout:.0f}s ({got} of {count})")
    conn.api(f"CONSUMER.DELETE.{stream}.{info['name']}")
    return size


def push_conn(server: Server, name: str, opts: Options) -> JsConn:
    conn = JsConn(server.endpoint, name, opts.timeout)
    conn.send(b"SUB %s %s\r\n" % (conn.push_inbox, SID_PUSH))
    conn.barrier(lambda frame: None)
    return conn


def kv_watch(server: Server, opts: Options, progress: ProgressFn) -> ThroughputResult:
    """Watches of a bucket of `watch_keys` keys, one after the other, for `duration`."""
    made = kv_bucket(server, WATCH_BUCKET)
    conn = push_conn(server, "kv-bench-watch", opts)
    config = ordered_config(conn, f"$KV.{WATCH_BUCKET}.>", "last_per_subject")
    try:
        if made:
            fill(conn, WATCH_BUCKET, opts.watch_keys)
        watches, secs = 0, 0.0
        cpu = CpuWindow(server.pid)
        cpu.start()
        while watches == 0 or secs < opts.duration:
            start = time.monotonic()
            consume(conn, f"KV_{WATCH_BUCKET}", config, opts.watch_keys)
            secs += time.monotonic() - start
            watches += 1
            progress(secs / opts.duration, watches * opts.watch_keys)
        cpu.stop()
    finally:
        conn.close()
    result = timed(ThroughputResult("kv-watch", SIZE, 1, watches * opts.watch_keys,
                                    watches * opts.watch_keys, 0.0), cpu)
    result.secs = secs  # the watches alone, not the deletes of their consumers
    return result


# -- objects -----------------------------------------------------------------------------------

async def _fresh_object_bucket(js: JetStreamContext, bucket: str) -> object:
    try:
        await js.delete_object_store(bucket)
    except NotFoundError:
        pass
    return await js.create_object_store(bucket, storage=StorageType.FILE)


async def _object_put(js: JetStreamContext, data: bytes, pid: int | None
                      ) -> ThroughputResult:
    store = await _fresh_object_bucket(js, OBJ_PUT_BUCKET)
    window = CpuWindow(pid)
    window.start()
    info = await store.put(OBJECT, data)  # type: ignore[attr-defined]
    window.stop()
    await js.delete_object_store(OBJ_PUT_BUCKET)
    result = timed(ThroughputResult("obj-put", len(data), 0, 1, 1, 0.0), window)
    if info.size != len(data):
        result.errors.append(f"stored {info.size} bytes of {len(data)}")
    return result


async def _stored_object(js: JetStreamContext, data: bytes) -> tuple[str, int]:
    """The object to read exists (put once, not timed): its nuid and its chunks."""
    try:
        store = await js.object_store(OBJ_GET_BUCKET)
        info = await store.get_info(OBJECT)
    except NotFoundError:
        store = await _fresh_object_bucket(js, OBJ_GET_BUCKET)
        info = await store.put(OBJECT, data)  # type: ignore[attr-defined]
    return str(info.nuid), int(info.chunks)


def object_get(server: Server, data: bytes, opts: Options,
               progress: ProgressFn) -> ThroughputResult:
    """Read the object's chunks through the ordered consumer nats-py's get makes; reads one
    after the other for `duration` (a read of 100 MiB is over in a fraction of a second)."""
    nuid, chunks = asyncio.run(_with_js(server, lambda js: _stored_object(js, data)))
    conn = push_conn(server, "kv-bench-obj-get", opts)
    config = ordered_config(conn, f"$O.{OBJ_GET_BUCKET}.C.{nuid}", "all")
    reads, secs, short = 0, 0.0, ""
    try:
        window = CpuWindow(server.pid)
        window.start()
        while reads == 0 or secs < opts.duration:
            start = time.monotonic()
            size = consume(conn, f"OBJ_{OBJ_GET_BUCKET}", config, chunks)
            secs += time.monotonic() - start
            reads += 1
            short = short or (f"read {size} bytes of {len(data)}" if size != len(data) else "")
            progress(secs / opts.duration, reads)
        window.stop()
    finally:
        conn.close()
    result = timed(ThroughputResult("obj-get", len(data), 1, reads, reads, 0.0), window)
    result.secs = secs  # the reads alone, not the deletes of their consumers
    if short:
        result.errors.append(short)
    return result


def object_put(server: Server, data: bytes) -> ThroughputResult:
    return asyncio.run(_with_js(server, lambda js: _object_put(js, data, server.pid)))


# -- measuring ---------------------------------------------------------------------------------

def timed(result: ThroughputResult, window: CpuWindow) -> ThroughputResult:
    """The run's wall time, the server's CPU, the client's (pub_cpu) and everyone else's."""
    result.secs = window.wall
    result.server_cpu = window.server_cores()
    result.pub_cpu = window.own / window.wall if window.wall > 0 else None
    result.other_cpu = window.other_cores(0.0)
    return result


def run_one(server: Server, name: str, opts: Options, data: bytes,
            progress: ProgressFn) -> ThroughputResult:
    """One run of the workload `name` on `server`; a failure is a result with its error."""
    size = len(data) if name.startswith("obj") else SIZE
    try:
        if name == "kv-watch":
            result = kv_watch(server, opts, progress)
        elif name.startswith("kv"):
            result = kv_requests(server, name, opts, progress)
        elif name == "obj-put":
            result = object_put(server, data)
        else:
            result = object_get(server, data, opts, progress)
    except (OSError, ProtocolError, NatsError, asyncio.TimeoutError) as e:
        result = ThroughputResult(name, size, 0, 0, 0, 0.0, errors=[f"{type(e).__name__}: {e}"])
    if not server.alive():
        result.errors.append(f"server died:\n{server.log_tail()}")
    return result


def describe(result: ThroughputResult, check: Check) -> str:
    if result.errors:
        return f"[red]error: {result.errors[0].splitlines()[0][:90]}[/red]"
    client = "-" if result.pub_cpu is None else f"{result.pub_cpu * 100:.0f}%"
    return f"{fmt(value_of(result, check.metric))} {check.unit} (client cpu {client})"


def measure(pair: tuple[Server, Server], wanted: list[Check], repeat: int, opts: Options,
            data: bytes, display: Display, runs: list[Run]) -> None:
    """Each check `repeat` times on each server, alternating (A/B/A/B)."""
    for check in wanted:
        for i in range(repeat):
            for server in pair:
                title = f"{check.title} on {server.name} ({i + 1}/{repeat})"
                display.begin(title)
                if not server.alive():
                    display.end(f"{title}: [red]server is not running[/red]")
                    continue
                result = run_one(server, check.spec.workload, opts, data, display)
                runs.append(Run(server.name, check.spec, result))
                display.end(f"  {title:<52} {describe(result, check)}")


def warm_up(pair: tuple[Server, Server], opts: Options) -> None:
    short = Options(duration=0.5, msgs=5_000, timeout=opts.timeout)
    for server in pair:
        if server.alive():
            run_one(server, "kv-put-pipelined", short, b"", no_progress)


# -- command line ------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per workload and server, the median counts (default: %(default)s)")
    p.add_argument("--duration", type=float, default=2.0,
                   help="seconds of KV puts, gets, watches or object reads per run "
                        "(default: %(default)s)")
    p.add_argument("--msgs", type=int, default=1_000_000,
                   help="puts or gets per run at most (default: %(default)s)")
    p.add_argument("--watch-keys", type=int, default=10_000,
                   help="keys in the watched bucket (default: %(default)s)")
    p.add_argument("--object-mib", type=int, default=100,
                   help="size of the object put and read (default: %(default)s)")
    p.add_argument("--workloads", help="only these, from kv-put,kv-put-pipelined,kv-get,"
                                       "kv-watch,obj-put,obj-get (default: all)")
    p.add_argument("--json", metavar="FILE", help="write checks, ratios and every run as JSON")
    p.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(stderr=True)
    opts = Options(duration=args.duration, msgs=args.msgs, watch_keys=args.watch_keys,
                   object_mib=args.object_mib)
    names = set(args.workloads.split(",")) if args.workloads else None
    wanted = [c for c in checks(opts) if names is None or c.spec.workload in names]
    data = os.urandom(opts.object_mib * MIB) if any(
        c.spec.workload.startswith("obj") for c in wanted) else b""
    runs: list[Run] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kvbench-") as tmp:
        pair = servers(Path(tmp))
        display = Display(console, 2 * len(wanted) * args.repeat)

        def body() -> None:
            with running(list(pair)) as started_servers:
                announce(display, started_servers)
                warm_up(pair, opts)
                measure(pair, wanted, args.repeat, opts, data, display, runs)

        failed = guarded(display, body)
        if failed:
            return failed
    verdicts = judge(runs, wanted)
    footer = (f"median of {args.repeat} run(s) per server, {args.duration:g} s of KV "
              f"puts, gets, watches or object reads per run, {SIZE} B values over {KEYS:,} keys, "
              f"a {opts.object_mib} MiB object, file storage; srv cpu = server CPU in % of one "
              f"core; {os.cpu_count()} cpus; {time.monotonic() - started:.0f} s in all")
    return report(verdicts, runs, pair, footer,
                  {"repeat": args.repeat, "duration": args.duration, "msgs": args.msgs,
                   "size": SIZE, "keys": KEYS, "watch_keys": opts.watch_keys,
                   "object_mib": opts.object_mib}, args, console)


if __name__ == "__main__":
    sys.exit(main())
