"""The `tidings` command: server, and the tools built on the library."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from .server.options import add_server_arguments, options_from_args


def _setup_logging(quiet: bool, debug: bool) -> None:
    level = logging.ERROR if quiet else logging.DEBUG if debug else logging.INFO
    logging.basicConfig(
        level=level,
        format=f"[{os.getpid()}] %(asctime)s [%(levelname).3s] %(message)s",
        stream=sys.stderr,
    )


def _cmd_server(args: argparse.Namespace) -> int:
    from .server.server import install_uvloop, run

    _setup_logging(args.no_log, args.debug)
    install_uvloop()
    options = options_from_args(args)
    if args.store != "memory" or args.dir:
        logging.getLogger("tidings").info(
            "streaming store %s%s requested", args.store, f" in {args.dir}" if args.dir else ""
        )
    try:
        asyncio.run(run(options))
    except KeyboardInterrupt:
        pass
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tidings", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    server = commands.add_parser("server", help="run a NATS server")
    add_server_arguments(server)
    streaming = server.add_argument_group("streaming")
    streaming.add_argument("--cluster_id", default="test-cluster", help="streaming cluster id")
    streaming.add_argument("--store", choices=("memory", "file", "sql"), default="memory",
                           help="streaming store (default %(default)s)")
    streaming.add_argument("--dir", default="", help="streaming store directory")
    streaming.add_argument("--no_streaming", action="store_true", help="turn streaming off")
    server.set_defaults(func=_cmd_server)

    from .bench import cli as bench_cli

    bench = commands.add_parser("bench", help="measure any NATS server (like `nats bench`)")
    bench_cli.configure(bench)
    bench.set_defaults(func=bench_cli.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
