#!/usr/bin/env python3
"""JetStream side by side: the reference nats-server against tidings, same workloads, alternating.

Starts the reference (`nats-server -js -sd <tmp>`), tidings (`tidings server -js -sd <tmp>
--no_streaming`) and a second tidings whose configuration says `jetstream { sync_interval:
always }`, each on free loopback ports with a store of its own, and measures with one raw-socket
client (tidings/bench/jetstream.py, the same for every server), 128 B messages on a file-storage
stream created fresh for each run:

- publish with acks, one synchronous publisher (each PubAck awaited);
- publish with acks, asynchronous, at most 256 PubAcks outstanding;
- the same with a unique `Nats-Msg-Id` on each message (100 B; what a Spark write with a
  message id column sends), the duplicate window's cost beside the plain row's;
- pull consume with explicit acks, fetch batch 500 (the stream filled first, not timed);
- push consume with explicit acks (a durable push consumer);
- the two publish workloads on tidings with `sync_interval: always` (every write fsync'd
  before its PubAck), against the reference's default (its runs of the same workloads).

Prints the compare.py table (figures, ratio tidings/reference, the targets of issue 24: 0.5 of
the reference each). `make bench` runs it after compare.py; `make bench-js` alone.

    python benchmarks/jetstream.py [--repeat N] [--duration S] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable from a checkout without installing the package
    sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from benchmarks.compare import (  # noqa: E402
    REFERENCE,
    TIDINGS,
    TIDINGS_JS,
    Check,
    Display,
    Run,
    Server,
    announce,
    describe,
    guarded,
    jetstream_servers,
    judge,
    report,
    running,
)
from tidings.bench.jetstream import (  # noqa: E402
    SID_ACKS,
    Frame,
    JsConn,
    prepare_stream,
    run_jetstream,
    windowed,
)
from tidings.bench.procstat import CpuWindow  # noqa: E402
from tidings.bench.results import ThroughputResult  # noqa: E402
from tidings.bench.runner import Spec  # noqa: E402
from tidings.bench.settings import JetStreamSettings, ProgressFn, Settings  # noqa: E402
from tidings.bench.wire import ProtocolError, make_payload  # noqa: E402

SIZE = 128
ID_SIZE = 100  # the msg-id row's payload
TARGET = 0.5  # of the reference, each row (issue 24)
ALWAYS = "tidings (sync always)"


@dataclass(frozen=True)
class Shape:
    """One workload of this comparison: the bench workload it runs and how."""

    workload: str  # js-pub or js-sub
    jetstream: JetStreamSettings
    consume: bool = False  # messages: --consume-msgs (the stream filled first), not --msgs
    msg_ids: bool = False  # each publish with a Nats-Msg-Id of its own


def _js(name: str, **kw: object) -> JetStreamSettings:
    return JetStreamSettings(stream=f"BENCH_{name.upper()}", subject=f"bench.js.{name}",
                             storage="file", fresh=True, **kw)  # type: ignore[arg-type]


SHAPES = {
    "js-pub-sync": Shape("js-pub", _js("pub_sync", window=1)),
    "js-pub-async": Shape("js-pub", _js("pub_async", window=256)),
    "js-pub-msgid": Shape("js-pub", _js("pub_msgid", window=256), msg_ids=True),
    "js-pull": Shape("js-sub", _js("pull", batch=500), consume=True),
    "js-push": Shape("js-sub", _js("push", push=True), consume=True),
}
ALWAYS_OF = {"js-pub-sync-always": "js-pub-sync", "js-pub-async-always": "js-pub-async"}

CHECKS = (
    Check("JS pub, acks, sync 128 B", Spec("js-pub-sync", SIZE), "msgs_per_s", "msgs/s",
          TARGET),
    Check("JS pub, acks, async ×256 128 B", Spec("js-pub-async", SIZE), "msgs_per_s", "msgs/s",
          TARGET),
    Check(f"JS pub async ×256, Nats-Msg-Id {ID_SIZE} B", Spec("js-pub-msgid", ID_SIZE),
          "msgs_per_s", "msgs/s", TARGET),
    Check("JS pull, acks, batch 500 128 B", Spec("js-pull", SIZE), "msgs_per_s", "msgs/s",
          TARGET),
    Check("JS push, acks 128 B", Spec("js-push", SIZE), "msgs_per_s", "msgs/s", TARGET),
    Check("JS pub sync, tidings sync always", Spec("js-pub-sync-always", SIZE), "msgs_per_s",
          "msgs/s", TARGET),
    Check("JS pub async ×256, tidings sync always", Spec("js-pub-async-always", SIZE),
          "msgs_per_s", "msgs/s", TARGET),
)


# -- servers -----------------------------------------------------------------------------------

def servers(store: Path) -> tuple[Server, Server, Server]:
    """The reference, tidings, and tidings with sync_interval: always; each its own store."""
    reference, tidings = jetstream_servers(store)
    (store / "always").mkdir()
    conf = store / "always.conf"
    conf.write_text(f'jetstream {{\n  store_dir: "{store / "always"}"\n'
                    "  sync_interval: always\n}\n")
    return reference, tidings, Server(ALWAYS, [*TIDINGS_JS, "-c", str(conf)])


# -- measuring ---------------------------------------------------------------------------------

def run_one(server: Server, name: str, size: int, settings: Settings, display: Display
            ) -> ThroughputResult:
    """One run of the workload `name` on `server`; a failure is a result with its error."""
    shape = SHAPES[name]
    side = replace(settings, endpoint=server.endpoint, server_pid=server.pid,
                   jetstream=shape.jetstream)
    try:
        result = (publish_with_ids(size, side, display) if shape.msg_ids
                  else run_jetstream(shape.workload, size, side, display))
    except (OSError, ProtocolError) as e:
        result = ThroughputResult(name, size, 0, 0, 0, 0.0, errors=[str(e)])
    result.workload = name
    if not server.alive():
        result.errors.append(f"server died:\n{server.log_tail()}")
    return result


def measure(pairs: list[tuple[Server, str, Spec]], repeat: int, settings: Settings,
            consume_msgs: int, display: Display, runs: list[Run]) -> None:
    """Each (server, side, spec) `repeat` times, alternating between the servers of a spec."""
    checks = {c.spec: c for c in CHECKS}
    for spec in dict.fromkeys(spec for _, _, spec in pairs):
        name = ALWAYS_OF.get(spec.workload, spec.workload)
        msgs = consume_msgs if SHAPES[name].consume else settings.msgs
        for i in range(repeat):
            for server, side, _ in (p for p in pairs if p[2] == spec):
                title = f"{spec.title(settings)} on {server.name} ({i + 1}/{repeat})"
                display.begin(title)
                if not server.alive():
                    display.end(f"{title}: [red]server is not running[/red]")
                    continue
                result = run_one(server, name, spec.size, replace(settings, msgs=msgs), display)
                runs.append(Run(side, spec, result))
                display.end(f"  {title:<58} {describe(result, checks[spec])}")


def id_frames(conn: JsConn, subject: str, size: int, count: int) -> list[bytes]:
    """`count` publishes (HPUB, the PubAck to the ack inbox), each with a Nats-Msg-Id of
    its own (a run's tag and the message's number)."""
    payload, tag = make_payload(size), os.urandom(4).hex().encode()
    head = b"HPUB %s %s " % (subject.encode(), conn.ack_inbox)
    frames = []
    for i in range(count):
        hdr = b"NATS/1.0\r\nNats-Msg-Id: %s-%012d\r\n\r\n" % (tag, i)
        frames.append(b"%s%d %d\r\n%s%s\r\n" % (head, len(hdr), len(hdr) + size, hdr,
                                                   payload))
    return frames


def publish_with_ids(size: int, settings: Settings, progress: ProgressFn) -> ThroughputResult:
    """js-pub (window settings.jetstream.window) with a unique Nats-Msg-Id on each message,
    on a stream made fresh; timed as js-pub is, the frames made before."""
    js = settings.jetstream
    conn = JsConn(settings.endpoint, "tidings-bench-js-pub-msgid", settings.timeout)
    acked, refused = [0], [""]
    try:
        prepare_stream(conn, js)
        frames = id_frames(conn, js.subject, size, settings.msgs)
        window = CpuWindow(settings.server_pid)
        window.start()
        sent = windowed(conn, frames, js.window, settings.msgs, settings.duration,
                        counter(acked, refused), lambda done, _: progress(done, acked[0]),
                        lambda n: f"no PubAck for {conn.timeout:.0f}s ({acked[0]} of {n})")
        window.stop()
        conn.api(f"STREAM.DELETE.{js.stream}")
    finally:
        conn.close()
    result = ThroughputResult("js-pub", size, 0, sent, acked[0], window.wall)
    if window.wall > 0:
        result.pub_cpu = window.own / window.wall
        result.server_cpu = window.server_cores()
        result.other_cpu = window.other_cores(0.0)
    if refused[0]:
        result.errors.append(f"{sent - acked[0]} publishes refused: {refused[0][:200]}")
    return result


def counter(acked: list[int], refused: list[str]) -> Callable[[list[Frame]], int]:
    """windowed's `take`: PubAcks counted in acked[0], the first refusal kept in refused[0]."""
    def take(frames: list[Frame]) -> int:
        answers = [f for f in frames if f[0] == SID_ACKS]
        for _, _, headers, data in answers:
            if b'"error"' in data or headers.startswith(b"NATS/1.0 503"):
                refused[0] = refused[0] or (data or headers).decode(errors="replace")
            else:
                acked[0] += 1
        return len(answers)
    return take


def warm_up(servers: list[Server], settings: Settings) -> None:
    short = replace(settings, msgs=2000, duration=0.5)
    for server in servers:
        if server.alive():
            try:
                run_jetstream("js-pub", SIZE, replace(short, endpoint=server.endpoint,
                                                      jetstream=_js("warm_up")))
            except (OSError, ProtocolError):
                pass  # the runs will say so


def with_reference_rows(runs: list[Run]) -> list[Run]:
    """The sync-always rows compare with the reference's runs of the same workload."""
    extra = [Run(REFERENCE, Spec(always, SIZE), r.result) for always, name in ALWAYS_OF.items()
             for r in runs if r.side == REFERENCE and r.spec == Spec(name, SIZE)]
    return runs + extra


# -- command line ------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per workload and server, the median counts (default: %(default)s)")
    p.add_argument("--duration", type=float, default=2.0,
                   help="seconds of publishing (or of consuming) per run at most "
                        "(default: %(default)s)")
    p.add_argument("--msgs", type=int, default=100_000,
                   help="publish runs: messages at most (default: %(default)s)")
    p.add_argument("--consume-msgs", type=int, default=50_000,
                   help="consume runs: messages in the stream to consume (default: %(default)s)")
    p.add_argument("--workloads",
                   help=f"only these, from {','.join([*SHAPES, *ALWAYS_OF])} (default: all)")
    p.add_argument("--json", metavar="FILE", help="write checks, ratios and every run as JSON")
    p.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(stderr=True)
    wanted = set(args.workloads.split(",")) if args.workloads else None
    checks = [c for c in CHECKS if wanted is None or c.spec.workload in wanted]
    settings = Settings(msgs=args.msgs, duration=args.duration, timeout=30.0)
    runs: list[Run] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jsbench-") as tmp:
        reference, tidings, always = servers(Path(tmp))
        pairs: list[tuple[Server, str, Spec]] = []
        for c in checks:
            if c.spec.workload in ALWAYS_OF:
                pairs.append((always, TIDINGS, c.spec))
            else:
                pairs += [(reference, REFERENCE, c.spec), (tidings, TIDINGS, c.spec)]
        if any(c.spec.workload in ALWAYS_OF for c in checks):  # their reference rows
            pairs += [(reference, REFERENCE, Spec(ALWAYS_OF[c.spec.workload], SIZE))
                      for c in checks if c.spec.workload in ALWAYS_OF
                      and Spec(ALWAYS_OF[c.spec.workload], SIZE) not in
                      {p[2] for p in pairs}]
        display = Display(console, len(pairs) * args.repeat)

        def body() -> None:
            with running([reference, tidings, always]) as started_servers:
                announce(display, started_servers)
                warm_up(started_servers, settings)
                pairs.sort(key=lambda p: list(SHAPES).index(
                    ALWAYS_OF.get(p[2].workload, p[2].workload)))
                measure(pairs, args.repeat, settings, args.consume_msgs, display, runs)

        failed = guarded(display, body)
        if failed:
            return failed
    verdicts = judge(with_reference_rows(runs), checks)
    footer = (f"median of {args.repeat} run(s) per server, {args.duration:g} s each at most "
              f"({args.msgs:,} msgs to publish, {args.consume_msgs:,} to consume), {SIZE} B "
              f"({ID_SIZE} B with msg ids), file storage; the sync-always rows: tidings with "
              f"`jetstream {{ sync_interval: always }}` against the reference's default; srv "
              f"cpu = server CPU in % of one core; {os.cpu_count()} cpus; {time.monotonic() - started:.0f} s in all")
    return report(verdicts, runs, (reference, tidings, always), footer,
                  {"repeat": args.repeat, "duration": args.duration, "msgs": args.msgs,
                   "consume_msgs": args.consume_msgs, "size": SIZE}, args, console)


if __name__ == "__main__":
    sys.exit(main())
