"""The `tidings` command: server, and the tools built on the library."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

from .config.flags import add_server_arguments, options_from_args
from .config.server import ServerOptions
from .flagparser import FlagParser, UsageError, report
from .oserrors import about, describe


def _setup_logging(quiet: bool, debug: bool, trace: bool = False, logtime: bool = True,
                   log_file: str = "", size_limit: int = 0) -> None:
    from .logs import setup

    try:
        setup(quiet=quiet, debug=debug, trace=trace, logtime=logtime, log_file=log_file,
              size_limit=size_limit)
    except OSError as exc:
        raise about("log file", log_file, exc) from exc


def _cmd_server(args: argparse.Namespace) -> int:
    if args.version:
        from . import __version__
        from .server.server import NATS_VERSION

        print(f"tidings-server: v{__version__} (nats-server v{NATS_VERSION} protocol)")
        return 0
    if args.signal:
        from .server.signal_cmd import send_signal

        return send_signal(args.signal, args.pid_file)
    base = None
    conf: dict[str, Any] = {}
    if args.config:
        from .config.server import load_server_config

        base, conf = load_server_config(args.config)
    options = options_from_args(args, base)
    if args.test_config:
        if not args.config:
            raise ValueError("-t needs a configuration file (-c FILE)")
        print(f"tidings-server: configuration file {args.config} is valid")
        return 0
    start_logging(options)
    return serve(args, options, conf)


def start_logging(options: ServerOptions) -> None:
    """Logging as the server's options say (-D, -V, -T, -l, ...)."""
    _setup_logging(options.no_log, options.debug, options.trace, options.logtime,
                   options.log_file, options.log_size_limit)


def serve(args: argparse.Namespace, options: ServerOptions, conf: dict[str, Any]) -> int:
    """Run a node (and its embedded streaming server unless --no_streaming) until stopped;
    `conf` is the configuration file's top level (its `streaming {}` block), `args` the
    command line (the streaming flags, the file to reload)."""
    from .server.allocator import giving_back, keep_freed_memory
    from .server.server import install_uvloop

    install_uvloop()
    give_back = keep_freed_memory()
    sopts = None
    if not args.no_streaming:
        from .streaming.server import options_from_args as streaming_options

        sbase = None
        if isinstance(conf.get("streaming"), dict):
            from .streaming.server.options import StreamingOptions, apply_config

            sbase = apply_config(StreamingOptions(), conf["streaming"])
        sopts = streaming_options(args, sbase)

    reload_options = None
    if args.config:
        def reload_options() -> ServerOptions:
            from .config.server import load_server_config

            new = options_from_args(args, load_server_config(args.config)[0])
            start_logging(new)
            return new

    async def main() -> None:
        from .node import Node

        await Node(options, sopts).run(reload_options)

    with _pid_file(options.pid_file):
        try:
            asyncio.run(giving_back(give_back, main()))
        except KeyboardInterrupt:
            pass
    return 0


@contextlib.contextmanager
def _pid_file(path: str) -> Iterator[None]:
    """Write our PID to `path` (-P) while the server runs, as the reference does."""
    if not path:
        yield
        return
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write(str(os.getpid()))
    except OSError as exc:
        raise about("pid file", path, exc) from exc
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _cmd_streaming(args: argparse.Namespace) -> int:
    from .server.allocator import giving_back, keep_freed_memory
    from .server.server import install_uvloop

    _setup_logging(args.no_log, args.debug)
    if args.streaming_command == "import-ref":
        return _cmd_import_ref(args)
    if args.streaming_command == "migrate":
        from .streaming import migrate

        return migrate.run(args)
    from .streaming.server import options_from_args as streaming_options
    from .streaming.server import run_standalone

    install_uvloop()
    give_back = keep_freed_memory()
    sopts = streaming_options(args)
    from .streaming.server.banner import log_banner, monitoring_url

    log_banner(sopts, monitoring_url("http", sopts.http_host, sopts.http_port))
    try:
        asyncio.run(giving_back(give_back, run_standalone(sopts)))
    except KeyboardInterrupt:
        pass
    return 0


def _cmd_import_ref(args: argparse.Namespace) -> int:
    from .streaming.importref import check_source, import_reference
    from .streaming.server import options_from_args as streaming_options
    from .streaming.server.options import open_store_for

    sopts = streaming_options(args)
    if sopts.store == "memory" or (sopts.store == "file" and not sopts.dir):
        raise UsageError("choose a durable store (--store file --dir DIR, or --store sql)")
    check_source(args.source)  # before the store exists: a bad source creates nothing
    store = open_store_for(sopts)
    try:
        report = import_reference(args.source, store)
    finally:
        store.close()
    print(f"imported cluster {report.cluster_id!r}: {report.channels} channel(s), "
          f"{report.messages} message(s), {report.subscriptions} subscription(s), "
          f"{report.clients} client(s)")
    for w in report.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def _cmd_pipeline(args: argparse.Namespace) -> int:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        print(f"tidings pipeline needs Spark: pip install 'tidings[spark]' ({exc})",
              file=sys.stderr)
        return 2
    from .spark import pipeline

    return pipeline.run(args)


def _configure_streaming(stan: argparse.ArgumentParser) -> None:
    """The flags and sub-commands of `tidings streaming`."""
    from .streaming.server.flags import add_streaming_arguments

    add_streaming_arguments(stan, standalone=True)
    stan.add_argument("-q", "--quiet", dest="no_log", action="store_true", help="log only errors")
    stan.add_argument("-D", "--debug", action="store_true", help="debug logging")
    stan.set_defaults(func=_cmd_streaming, streaming_command="run")
    stan_commands = stan.add_subparsers(dest="streaming_command")
    imp = stan_commands.add_parser(
        "import-ref", help="import a reference nats-streaming-server file store directory")
    imp.add_argument("source", help="the reference server's data directory (read only)")
    for flag, kw in (("--store", {"type": str.lower, "choices": ("file", "sql")}),
                     ("--dir", {}), ("--sql_driver", {"choices": ("sqlite", "postgres")}),
                     ("--sql_source", {})):
        imp.add_argument(flag, default=argparse.SUPPRESS, **kw)  # type: ignore[arg-type]
    from .streaming import migrate

    mig = stan_commands.add_parser(
        "migrate", help="move channels and durable subscriptions to JetStream streams and "
        "consumers", description=migrate.DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    migrate.configure(mig)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line; with `command` ("server", ...) the other commands get only their
    names, so that starting a server does not import the benchmark tools or Spark's."""
    parser = FlagParser(prog="tidings", description=__doc__)
    parser.usage_on_error = True  # one line: the commands
    commands = parser.add_subparsers(dest="command", required=True)

    # No abbreviations: `-c` must never be taken for `-cid`, nor `--clus` for anything.
    server = commands.add_parser("server", help="run a NATS server", allow_abbrev=False)
    add_server_arguments(server)
    from .streaming.server.flags import add_streaming_arguments

    streaming = server.add_argument_group("streaming")
    add_streaming_arguments(streaming)
    streaming.add_argument("--no_streaming", action="store_true",
                           help="turn the streaming server off")

    stan = commands.add_parser(
        "streaming", help="run the streaming server against any NATS server (or import data, or "
        "migrate it to JetStream)")
    if command in (None, "streaming"):
        _configure_streaming(stan)
    server.set_defaults(func=_cmd_server)

    bench = commands.add_parser("bench", help="measure any NATS server (like `nats bench`)")
    if command in (None, "bench"):
        from .bench import cli as bench_cli

        bench_cli.configure(bench)
        bench.set_defaults(func=bench_cli.run)

    link = commands.add_parser(
        "nats-server-link", help="make DIR/nats-server: tidings as a drop-in nats-server",
        description="Make DIR/nats-server, a link to this `tidings` command: started under "
        "that name, tidings is `tidings server --no_streaming` with nats-server's flags, log "
        "lines and messages, for test launchers that run `nats-server` from PATH.")
    link.add_argument("directory", help="where to put the link (made if missing)")
    link.add_argument("--force", action="store_true", help="replace a DIR/nats-server there")
    link.set_defaults(func=_cmd_link)

    help_text = "windowed aggregates of JSON events on Spark (tidings[spark])"
    if command in (None, "pipeline"):
        from .spark import pipeline as pipeline_cli

        pipeline = commands.add_parser(
            "pipeline", help=help_text, description=pipeline_cli.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter)
        pipeline_cli.configure(pipeline)
        pipeline.set_defaults(func=_cmd_pipeline)
    else:
        commands.add_parser("pipeline", help=help_text)
    return parser


def _cmd_link(args: argparse.Namespace) -> int:
    from .dropin import link

    made = link(args.directory, force=args.force)
    print(f"{made} -> {os.readlink(made)}")
    return 0


def user_errors() -> tuple[type[BaseException], ...]:
    """What a user's input or environment causes (a port in use, a bad path or address, a
    refused option, a server that cannot be reached): a message, never a traceback."""
    from .client.errors import Error as ClientError
    from .streaming.server.errors import CannotStart
    from .streaming.stores.base import StoreError

    return OSError, ValueError, StoreError, ClientError, CannotStart


def go_style(argv: list[str], known: set[str], switches: set[str] | None = None) -> list[str]:
    """nats-server parses its flags with Go's flag package, where `-name` and `--name` are
    the same flag: spell each the way it is declared here (`-routes` is `--routes`, `--ms`
    is `-ms`), leaving values and unknown words alone. A `-name` that is no flag (Go style,
    mistyped) becomes `--name`, an unknown flag, rather than `-n` with the value `ame`;
    `-DV` (the `switches` -D and -V at once) and `-p4222` stay as argparse reads them."""
    out: list[str] = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        if name.startswith("--") and name not in known and name[1:] in known:
            arg = name[1:] + eq + value
        elif (name.startswith("-") and not name.startswith("--") and len(name) > 2
              and name not in known):
            if "-" + name in known or _go_style_unknown(name, switches or set()):
                arg = "-" + name + eq + value
        out.append(arg)
    return out


def _go_style_unknown(name: str, switches: set[str]) -> bool:
    """Whether `-word` is a flag name no flag has, not short flags run together."""
    word = name[1:]
    if not word.replace("_", "").isalpha():
        return False  # -p4222: -p and its value
    return not all(f"-{c}" in switches for c in word)


def go_style_args(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`go_style` with the flags and switches of `parser`."""
    flags = parser._option_string_actions
    switches = {o for o, a in flags.items() if len(o) == 2 and a.nargs == 0}
    return go_style(argv, set(flags), switches)


def main(argv: list[str] | None = None) -> int:
    """The `tidings` command; started under the name `nats-server` (a link), the drop-in."""
    if argv is None:
        from . import dropin

        if dropin.started_as_nats_server():
            return dropin.main(sys.argv[1:])
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv and not argv[0].startswith("-") else None)
    if argv and argv[0] == "server":
        server = parser._subparsers._group_actions[0].choices["server"]  # type: ignore[union-attr]
        argv = ["server", *go_style_args(server, argv[1:])]
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except user_errors() as exc:
        if getattr(args, "debug", False):
            logging.getLogger("tidings").exception("%s failed", args.command)
        return report(f"{parser.prog} {_command(args)}", describe(exc), exc)


def _command(args: argparse.Namespace) -> str:
    """`server`, `streaming`, `streaming import-ref`: the command that failed."""
    sub = getattr(args, "streaming_command", None)
    return f"{args.command} {sub}" if sub not in (None, "run") else args.command


if __name__ == "__main__":
    sys.exit(main())
