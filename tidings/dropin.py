"""`nats-server`, the drop-in: tidings started under that name (a link to the `tidings`
command, made by `tidings nats-server-link DIR`) is `tidings server --no_streaming` with the
reference's command line, so that the test launchers that spawn `nats-server` from PATH
(nats.py's `nats.server`, nats.js's nst, Go projects' helpers) run tidings unchanged.

As the reference's main.go: its flags in Go's style (`-js`, `-sd`, `-DV`, `-routes`,
`--port=-1`), `nats-server: vX.Y.Z` for -v, `-t`'s line on stderr with the digest of the
file, and `nats-server: <why>` (exit 1) for what stops it before it starts. A configuration
file the parser refuses is worded as the reference's parser words it (`Parse error on line
N: '...'` for its lexer's errors, `config is invalid (FILE:LINE:COL)`, and the bare words of
its own checks); one the options refuse is `FILE:LINE:COL: why`, tidings' why. What stops
it once it has begun to start (a port in use, a store that cannot be made) is a `[FTL]` log
line, as the reference's Fatalf. The server's own log lines (`Listening for client
connections on HOST:PORT`, `Server is ready`, ...) are those of `tidings server`, which has
the reference's.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

from .cli import go_style_args, serve, start_logging, user_errors
from .config.flags import add_server_arguments, options_from_args
from .config.parser import ConfigError
from .config.parser import load as parse_file
from .config.server import ServerOptions, load_server_config
from .flagparser import FlagParser
from .oserrors import cause, describe

NAME = "nats-server"

# Parse errors of the reference's parser itself (conf/parse.go), shown without a place; the
# others a parser refuses a file with are its lexer's, "Parse error on line N: '...'".
_PARSERS_OWN = re.compile(r"(integer|float) '.*' is out of the range|expected (integer|float|"
                          r"boolean|Zulu)|variable reference|error parsing include", re.S)
_PLACED = re.compile(r"(.+?):(\d+):(\d+): (.*)", re.S)  # tidings' FILE:LINE:COL: why


def started_as_nats_server(argv0: str | None = None) -> bool:
    """Whether this process was started under the name `nats-server` (sys.argv[0])."""
    name = sys.argv[0] if argv0 is None else argv0
    return Path(name).name == NAME


def build_parser() -> FlagParser:
    parser = FlagParser(prog=NAME, allow_abbrev=False, description=(
        "tidings as a drop-in nats-server: `tidings server --no_streaming` with "
        "nats-server's flags (Go style: -js, -DV, -routes), log lines and messages."))
    add_server_arguments(parser)
    return parser


def main(argv: list[str]) -> int:
    """`nats-server ARGS...`: its exit code."""
    parser = build_parser()
    args = parser.parse_args(go_style_args(parser, argv))
    args.no_streaming = True
    try:
        return run(args)
    except user_errors() as exc:
        print(f"{NAME}: {describe(exc)}", file=sys.stderr)
        return 1


def run(args: argparse.Namespace) -> int:
    """What main.go does with the parsed flags."""
    if args.version:
        from .server.server import NATS_VERSION

        print(f"{NAME}: v{NATS_VERSION}")
        return 0
    if args.signal:
        from .server.signal_cmd import send_signal

        return send_signal(args.signal, args.pid_file)
    if args.test_config and not args.config:
        raise ValueError("must specify [-c, --config] option to check configuration file "
                         "syntax")
    base, conf = load_config(args.config) if args.config else (None, {})
    options = options_from_args(args, base)
    if args.test_config:
        print(f"{NAME}: configuration file {args.config} is valid ({config_digest(conf)})",
              file=sys.stderr)
        return 0
    start_logging(options)
    try:
        return serve(args, options, conf)
    except user_errors() as exc:
        logging.getLogger("tidings.server").critical("%s", describe(exc))
        return 1


def load_config(path: str) -> tuple[ServerOptions, dict[str, Any]]:
    """The options of the file at `path` and its top level; ConfigError in the reference's
    words when it cannot be read or used."""
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:  # as Go's: "open FILE: no such file or directory"
        verb = "read" if isinstance(exc, IsADirectoryError) else "open"
        raise ConfigError(f"{verb} {path}: {cause(exc)}") from None
    try:
        return load_server_config(path)
    except ConfigError as exc:
        raise ConfigError(_config_words(path, str(exc))) from None


def _config_words(path: str, text: str) -> str:
    """tidings' words for a refused file as the reference's: the parser's in its words
    (parsed again, on this error only, to tell the parser's refusal from the options')."""
    try:
        parse_file(path)
    except ConfigError:
        return parse_error_words(text)
    return text


def parse_error_words(text: str) -> str:
    """A parse error of tidings (`FILE:LINE:COL: why`) as the reference's parser says it."""
    placed = _PLACED.fullmatch(text)
    if placed is None:
        return text
    file, line, col, why = placed.groups()
    if why == "config is invalid":
        return f"config is invalid ({file}:{line}:{col})"
    if _PARSERS_OWN.match(why):
        return why
    return f"Parse error on line {line}: '{why}'"


def config_digest(conf: dict[str, Any]) -> str:
    """The reference's ConfigDigest: sha256 of the parsed file as Go's encoding/json writes
    it (keys sorted; a float that is whole written as an integer, as Go's; a float below
    1e-6 would be written otherwise by Go)."""
    import hashlib

    from .server.gojson import go_json

    return "sha256:" + hashlib.sha256(go_json(_as_go(conf)) + b"\n").hexdigest()


def _as_go(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _as_go(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_as_go(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")  # the parser's dates are UTC
    return value


# -- `tidings nats-server-link DIR` -----------------------------------------------------------
def tidings_script() -> str:
    """The `tidings` command of this installation: the one running, else the one beside
    this interpreter's, else the one on PATH."""
    import shutil
    import sysconfig

    candidates = [os.path.join(sysconfig.get_path("scripts"), "tidings"),
                  shutil.which("tidings") or ""]
    if Path(sys.argv[0]).name == "tidings":
        candidates.insert(0, os.path.abspath(sys.argv[0]))
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise ValueError("no `tidings` command to link to (installing tidings with pip makes one)")


def link(directory: str, force: bool = False) -> Path:
    """DIR/nats-server, a symbolic link to the `tidings` command (DIR made if missing). One
    already there is kept if it is this link; anything else is replaced only with `force`."""
    target = tidings_script()
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / NAME
    if path.is_symlink() and os.readlink(path) == target:
        return path
    if (path.exists() or path.is_symlink()) and not force:
        raise ValueError(f"{path} exists (--force replaces it)")
    made = folder / f".{NAME}.{os.getpid()}"
    made.symlink_to(target)
    try:
        os.replace(made, path)
    except OSError:
        with contextlib.suppress(OSError):
            made.unlink()
        raise
    return path
