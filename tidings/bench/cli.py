"""`tidings bench`: run workloads against any NATS URL and print (and save) a results table."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import asdict

from rich.console import Console
from rich.markup import escape

from tidings.bench.crew import WorkerError
from tidings.bench.progress import RunProgress
from tidings.bench.report import print_results, write_csv, write_json
from tidings.bench.results import Result
from tidings.bench.runner import (
    DEFAULT_SIZES,
    DEFAULT_WORKLOADS,
    WORKLOADS,
    format_size,
    parse_sizes,
    parse_workloads,
    plan,
    run_spec,
)
from tidings.bench.settings import JetStreamSettings, Settings
from tidings.bench.wire import Conn, Endpoint, ProtocolError

WIDE = 150  # table width when stdout is a file or pipe, so columns are not squeezed
JS_NAMES = {"pub": "js-pub", "sub": "js-sub"}  # --js workloads, and what they run
JS_SIZES = "128"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Benchmark a NATS server: pub only, pub->sub, fan-out, queue group and request/reply "
        "latency for each payload size, from raw-socket load-generator processes; with --js, "
        "JetStream publish with acks and consume with acks.")
    add = parser.add_argument
    add("--url", default="nats://127.0.0.1:4222", help="server to measure (default: %(default)s)")
    add("--workloads",
        help=f"comma list from {','.join(WORKLOADS)} (default: {','.join(DEFAULT_WORKLOADS)}; "
             f"with --js: {','.join(JS_NAMES)}; memory needs --server-pid)")
    add("--sizes", help=f"payload sizes, e.g. 16,128,1KiB (default: {DEFAULT_SIZES}; "
                        f"with --js: {JS_SIZES})")
    add("--msgs", type=int, default=5_000_000,
        help="messages (or requests) per run at most (default: %(default)s)")
    add("--duration", type=float, default=3.0,
        help="seconds of publishing per run at most (default: %(default)s)")
    add("--subs", type=int, default=4,
        help="subscribers for fanout and queue (default: %(default)s)")
    add("--json", metavar="FILE", help="write the results as JSON")
    add("--csv", metavar="FILE", help="write the results as CSV")
    add("--server-pid", type=int, metavar="PID",
        help="pid of the server (same machine) to report its CPU use and memory")
    add("--conns", type=int, default=10_000,
        help="memory workload: idle connections (default: %(default)s)")
    add("--conn-subs", type=int, default=10,
        help="memory workload: subscriptions per connection (default: %(default)s)")
    add("--timeout", type=float, default=10.0,
        help="give up a run when nothing moves for this many seconds (default: %(default)s)")
    configure_jetstream(parser)


def configure_jetstream(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("JetStream (as nats bench --js)")
    add = group.add_argument
    add("--js", action="store_true",
        help="pub: publish with acks (PubAcks awaited, --pubbatch outstanding); sub: fill the "
             "stream, then consume it with explicit acks (pull, --pullbatch at a time, or "
             "--push); the stream is created when it does not exist")
    add("--stream", default="benchstream", help="the stream (default: %(default)s)")
    add("--subject", default="benchsubject",
        help="the subject the stream captures, published to (default: %(default)s)")
    add("--storage", choices=("file", "memory"), default="file",
        help="storage of the stream when created (default: %(default)s)")
    add("--pubbatch", type=int, default=256,
        help="PubAcks outstanding at most while publishing (default: %(default)s)")
    add("--syncpub", action="store_true",
        help="publish synchronously: each PubAck awaited (--pubbatch 1)")
    kind = group.add_mutually_exclusive_group()
    kind.add_argument("--pull", action="store_true", help="sub from a pull consumer (default)")
    kind.add_argument("--push", action="store_true", help="sub from a push consumer")
    add("--pullbatch", type=int, default=500,
        help="messages per pull request (default: %(default)s)")


def choose_workloads(args: argparse.Namespace) -> tuple[list[str], list[int]]:
    """The workloads and sizes asked for; with --js, pub and sub are the JetStream ones."""
    if not args.js:
        return (parse_workloads(args.workloads or ",".join(DEFAULT_WORKLOADS)),
                parse_sizes(args.sizes or DEFAULT_SIZES))
    names = [n.strip() for n in (args.workloads or ",".join(JS_NAMES)).split(",") if n.strip()]
    other = [n for n in names if n not in JS_NAMES]
    if other:
        raise ValueError(f"with --js the workloads are {' and '.join(JS_NAMES)}, "
                         f"not {', '.join(other)}")
    if args.pubbatch < 1 or args.pullbatch < 1:
        raise ValueError("--pubbatch and --pullbatch must be at least 1")
    return [JS_NAMES[n] for n in names], parse_sizes(args.sizes or JS_SIZES)


def jetstream_settings(args: argparse.Namespace) -> JetStreamSettings:
    return JetStreamSettings(stream=args.stream, subject=args.subject, storage=args.storage,
                             window=1 if args.syncpub else args.pubbatch,
                             batch=args.pullbatch, push=args.push)


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    out = Console() if sys.stdout.isatty() else Console(width=WIDE)
    try:
        endpoint = Endpoint.parse(args.url)
        workloads, sizes = choose_workloads(args)
    except ValueError as e:
        err.print(f"[red]error:[/red] {e}")
        return 2
    try:
        probe = Conn(endpoint, "tidings-bench-probe", timeout=args.timeout)
    except (OSError, ProtocolError) as e:
        err.print(f"[red]error:[/red] cannot handshake with {endpoint}: {e}")
        return 2
    info = probe.info
    probe.close()
    max_payload = int(info.get("max_payload", 1 << 20))  # type: ignore[call-overload]
    err.print(f"server {endpoint}: {info.get('server_name') or info.get('server_id', '?')} "
              f"version {info.get('version', '?')}, max_payload {max_payload:,}")
    settings = Settings(endpoint=endpoint, msgs=args.msgs, duration=args.duration, subs=args.subs,
                        server_pid=args.server_pid, timeout=args.timeout, conns=args.conns,
                        conn_subs=args.conn_subs, jetstream=jetstream_settings(args))
    results: list[Result] = []
    interrupted = False
    failure = ""  # a run that could not go on: what finished is still reported
    try:
        for spec in plan(workloads, sizes):
            title = spec.title(settings)
            if spec.size > max_payload:
                err.print(f"[yellow]skip[/yellow] {title}: over the server's max_payload")
                continue
            unit = "conns" if spec.workload == "memory" else "msgs"
            try:
                with RunProgress(err, title, unit) as progress:
                    result = run_spec(spec, settings, progress)
            except (OSError, ProtocolError, WorkerError) as e:
                failure = f"{title} failed: {e}"
                break
            results.append(result)
            failed = " [red]with errors[/red]" if result.errors else ""
            err.print(f"[dim]done {title}{failed}[/dim]")
    except KeyboardInterrupt:
        interrupted = True
        err.print("[yellow]interrupted: results so far[/yellow]")
    print_results(out, results)
    doc = {
        "tool": "tidings bench",
        "url": str(endpoint),
        "server": info,
        "client": {"python": platform.python_version(), "machine": platform.machine(),
                   "cpus": os.cpu_count(), "platform": platform.platform()},
        "settings": {"workloads": workloads, "sizes": [format_size(s) for s in sizes],
                     "msgs": args.msgs, "duration": args.duration, "subs": args.subs,
                     "server_pid": args.server_pid, "conns": args.conns,
                     "conn_subs": args.conn_subs,
                     "jetstream": asdict(settings.jetstream) if args.js else None},
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "results": [r.to_dict() for r in results],
    }
    if args.json:
        write_json(args.json, doc)
        err.print(f"wrote {args.json}")
    if args.csv:
        write_csv(args.csv, results)
        err.print(f"wrote {args.csv}")
    if failure:
        err.print(f"[red]error:[/red] {escape(failure)}", soft_wrap=True)
    if interrupted:
        return 130
    return 1 if failure or any(r.errors for r in results) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tidings bench")
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
