"""`tidings streaming migrate`: its flags, its progress bar, its report.

The work is :mod:`.migrate_run`'s, loaded only when the command runs (building the
`tidings streaming` command line loads nothing of it).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .migrate_plan import Settings, StreamPlan
    from .migrate_run import Advance, Report
    from .migrate_sources import Source

DESCRIPTION = """\
Move a NATS Streaming deployment to JetStream: each channel into a stream of the same name
(or --map CHANNEL=STREAM) whose sequences are the channel's, every message with its original
sequence and timestamp in headers (Nats-Streaming-Sequence, Nats-Streaming-Timestamp) and a
Nats-Msg-Id; then each durable subscription into a durable consumer that delivers from its
first unacknowledged message. Run it again after an interruption: it goes on where each
stream stands. Details: docs/streaming.md, "Migrating to JetStream".
"""


# --- progress and the report --------------------------------------------------------------


class Meter:
    """A progress bar per channel (rich) on a terminal; nothing otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.progress: Any = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"), TimeRemainingColumn(),
                console=Console(stderr=True), transient=False)
            self.progress.start()

    def channel(self, plan: StreamPlan) -> Advance:
        if self.progress is None:
            return lambda n: None
        progress = self.progress
        task = progress.add_task(f"{plan.channel.name} -> {plan.stream}",
                                 total=max(plan.to_copy, 1), rate="")
        started = time.perf_counter()
        done = [0]

        def advance(n: int) -> None:
            done[0] += n
            rate = done[0] / max(time.perf_counter() - started, 1e-6)
            progress.update(task, advance=n, rate=f"{rate:,.0f} msgs/s")
        if plan.to_copy == 0:
            progress.update(task, completed=1)
        return advance

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def summary(report: Report) -> str:
    lines = []
    for p in report.plans:
        if p.stream not in report.copied:
            continue
        n = report.copied[p.stream]
        lines.append(f"channel {p.channel.name!r} -> stream {p.stream!r}: {n} message(s) "
                     f"copied, at {p.resume_from + n - 1 if n else p.resume_from - 1} of "
                     f"{p.channel.last_seq}")
        if report.complete:
            for c in p.consumers:
                state = "was there" if c.exists else "created"
                lines.append(f"  consumer {c.durable.name!r} {state}: first delivery at "
                             f"{c.config['opt_start_seq']}")
    rate = report.total / report.seconds if report.seconds > 0 else 0.0
    lines.append(f"{report.total} message(s) in {report.seconds:.2f} s ({rate:,.0f} msgs/s), "
                 f"{report.consumers} consumer(s) created")
    if not report.complete:
        lines.append("stopped before the end (no consumer made yet): run the same command "
                     "again to go on")
    return "\n".join(lines)


# --- the command --------------------------------------------------------------------------


def configure(parser: argparse.ArgumentParser) -> None:
    """The flags of `tidings streaming migrate`."""
    src = parser.add_argument_group("source (a running server, or a store)")
    src.add_argument("--url", dest="source_url", metavar="URL",
                     help="NATS URL of a running streaming server (needs --monitor)")
    src.add_argument("--monitor", metavar="URL",
                     help="its monitoring, e.g. http://127.0.0.1:8222 (/streaming/channelsz)")
    src.add_argument("--cluster-id", "--cluster_id", dest="source_cluster_id", default="",
                     metavar="ID", help="its cluster id (default: the one monitoring gives)")
    src.add_argument("--client-id", dest="source_client_id", default="stan2js", metavar="ID",
                     help="the client id to read with (default %(default)s)")
    src.add_argument("--dir", dest="source_dir", metavar="DIR",
                     help="a store directory: tidings' file store (or its streaming.db) "
                          "or nats-streaming-server's file store, no server running on it")
    src.add_argument("--sqlite", dest="source_sqlite", metavar="FILE",
                     help="a tidings SQLite store")
    src.add_argument("--postgres", dest="source_postgres", metavar="DSN",
                     help="a tidings PostgreSQL store")
    parser.add_argument("--to", metavar="URL",
                        help="the JetStream server (tidings -js or nats-server -js); "
                             "optional with --dry-run")
    parser.add_argument("--channel", action="append", default=[], metavar="NAME",
                        help="a channel to migrate (repeat; default: every channel)")
    parser.add_argument("--map", action="append", default=[], metavar="CHANNEL=STREAM",
                        help="the stream a channel becomes (repeat; default: its name)")
    parser.add_argument("--pull", action="store_true",
                        help="make the consumers pull consumers (default: push, on a new inbox)")
    parser.add_argument("--storage", choices=("file", "memory"), default="file",
                        help="the streams' storage (default %(default)s)")
    parser.add_argument("--replicas", type=int, default=1, help="the streams' replicas")
    parser.add_argument("--window", type=int, default=4096,
                        help="PubAcks awaited at most at a time (default %(default)s)")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="copy at most N messages in this run (run again to go on)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would be created (streams, consumers, message "
                             "counts) and create nothing")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def open_source(args: argparse.Namespace) -> Source:
    from .migrate_plan import MigrateError

    given = [f for f in ("source_url", "source_dir", "source_sqlite", "source_postgres")
             if getattr(args, f, None)]
    if len(given) != 1:
        raise MigrateError("name one source: --url URL --monitor URL (a running server), "
                           "--dir DIR, --sqlite FILE or --postgres DSN")
    if args.source_url:
        if not args.monitor:
            raise MigrateError("--url needs --monitor (the server's monitoring URL: the "
                               "channels are listed there)")
        from .migrate_live import LiveSource

        return LiveSource(args.source_url, args.monitor, args.source_cluster_id,
                          args.source_client_id)
    from .migrate_sources import open_directory, open_sql

    if args.source_dir:
        return open_directory(args.source_dir)
    if args.source_sqlite:
        return open_sql("sqlite", args.source_sqlite)
    return open_sql("postgres", args.source_postgres)


def settings_from(args: argparse.Namespace) -> Settings:
    from .migrate_plan import MigrateError, Options, Settings, parse_maps

    if not args.to and not args.dry_run:
        raise MigrateError("--to URL is needed (the JetStream server), except with --dry-run")
    if args.limit is not None and args.limit < 0:
        raise MigrateError("--limit must be 0 or more")
    opts = Options(tuple(args.channel), parse_maps(args.map), args.pull, args.storage,
                   args.replicas)
    return Settings(opts, args.dry_run, args.limit, max(args.window, 1))


async def main(args: argparse.Namespace) -> int:
    from .migrate_plan import describe
    from .migrate_run import plan_migration, run_migration
    from .migrate_target import JetStreamTarget

    settings = settings_from(args)
    source = open_source(args)
    target = None
    try:
        if args.to:
            target = await JetStreamTarget.connect(args.to)
        plans = await plan_migration(source, target, settings)
        if settings.dry_run:
            print(describe(plans) or "no channel to migrate")
            return 0
        assert target is not None
        meter = Meter(not args.no_progress and sys.stderr.isatty())
        try:
            report = await run_migration(source, target, plans, settings, meter)
        finally:
            meter.close()
        print(summary(report))
        return 0
    finally:
        for w in getattr(source, "warnings", []):  # what the reference store's reader found
            print(f"warning: {w}", file=sys.stderr)
        await source.close()
        if target is not None:
            await target.close()


def run(args: argparse.Namespace) -> int:
    """`tidings streaming migrate ...`"""
    import asyncio

    from ..server.server import install_uvloop

    install_uvloop()
    try:
        return asyncio.run(main(args))
    except KeyboardInterrupt:
        print("interrupted: run the same command again to go on", file=sys.stderr)
        return 130
