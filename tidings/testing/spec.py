"""What a test server is started with: `ServerSpec`, as command-line flags or as options.

One spec serves both kinds of server: `argv()` gives the flags of `tidings server` (for a
subprocess), `core_options()` and `streaming_options()` the dataclasses an in-process server
is built from. Nothing here imports the server until those two are called.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

# ServerOptions fields whose flag is not `--<field>`.
_FLAGS = {"password": "--pass", "token": "--auth", "http_port": "--http_port"}
_BOOL_FLAGS = {"debug": "-D", "trace": "-V", "no_advertise": "--no_advertise"}


@dataclass
class ServerSpec:
    """Options of a test server. Unknown keywords go to `extra` (more ServerOptions fields,
    passed as `--<name> <value>` to a subprocess)."""

    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port, chosen at the first start and kept on restart
    user: str = ""
    password: str = ""
    token: str = ""
    max_payload: int | None = None
    config: str = ""  # the text of a configuration file (nats-server's format)
    streaming: bool = False
    store: str = "file"  # streaming store: memory, file or sql (sqlite in store_dir)
    store_dir: str = ""  # set by the fixtures: a fresh temporary directory per server
    cluster_id: str = "test-cluster"
    cluster: str | bool = ""  # route listener URL; True: nats://host:0 (a port of its own)
    routes: list[Any] = field(default_factory=list)  # URLs, or servers (their cluster_url)
    cluster_name: str = ""
    name: str = ""
    debug: bool = False
    trace: bool = False
    args: list[str] = field(default_factory=list)  # more flags (subprocess servers only)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> ServerSpec:
        known = {f.name for f in fields(cls)} - {"extra"}
        spec = cls(**{k: v for k, v in kwargs.items() if k in known})
        spec.extra = {k: v for k, v in kwargs.items() if k not in known}
        if spec.cluster is True:
            spec.cluster = f"nats://{spec.host}:0"  # the port read back once it listens
        return spec

    @property
    def route_urls(self) -> list[str]:
        return [r if isinstance(r, str) else r.cluster_url for r in self.routes]

    def config_path(self, workdir: Path) -> str:
        """Write the configuration text to `workdir` (once); '' without one."""
        if not self.config:
            return ""
        path = workdir / "server.conf"
        if not path.exists():
            path.write_text(self.config)
        return str(path)

    def argv(self, workdir: Path) -> list[str]:
        """The flags of `tidings server` for this spec (port: the one to listen on)."""
        out = ["-a", self.host, "-p", str(self.port)]
        if conf := self.config_path(workdir):
            out += ["-c", conf]
        values: dict[str, Any] = {"user": self.user, "password": self.password,
                                  "token": self.token, "max_payload": self.max_payload,
                                  "name": self.name, "cluster": self.cluster,
                                  "cluster_name": self.cluster_name, **self.extra}
        if self.route_urls:
            values["routes"] = ",".join(self.route_urls)
        for key, value in values.items():
            if key in _BOOL_FLAGS:
                out += [_BOOL_FLAGS[key]] if value else []
            elif value not in (None, ""):
                out += [_FLAGS.get(key, f"--{key}"), str(value)]
        out += [flag for key, flag in _BOOL_FLAGS.items() if getattr(self, key, False)]
        if self.streaming:
            out += ["--cluster_id", self.cluster_id, "--store", self.store]
            if self.store_dir:
                out += ["--dir", self.store_dir]
        else:
            out.append("--no_streaming")
        return out + list(self.args)

    def core_options(self, workdir: Path) -> tuple[Any, dict[str, Any]]:
        """ServerOptions for an in-process server, and the configuration file's top level
        (for its `streaming { }` block)."""
        from dataclasses import replace

        from ..config.server import ServerOptions, check

        base, conf = ServerOptions(), {}
        if path := self.config_path(workdir):
            from ..config.server import load_server_config

            base, conf = load_server_config(path)
        given: dict[str, Any] = {"host": self.host, "port": self.port, **self.extra}
        for key in ("user", "password", "token", "name", "cluster", "cluster_name"):
            if getattr(self, key):
                given[key] = getattr(self, key)
        if self.max_payload is not None:
            given["max_payload"] = self.max_payload
        if self.routes:
            given["routes"] = self.route_urls
        if self.debug:
            given["debug"] = True
        if self.trace:
            given["trace"] = True
        options = replace(base, **given)
        check(options)
        return options, dict(conf)

    def streaming_options(self, conf: dict[str, Any]) -> Any:
        """StreamingOptions for the embedded streaming server of an in-process server."""
        from dataclasses import replace

        from ..streaming.server.options import StreamingOptions, apply_config

        base = StreamingOptions()
        if isinstance(conf.get("streaming"), dict):
            base = apply_config(base, conf["streaming"])
        return replace(base, cluster_id=self.cluster_id, store=self.store, dir=self.store_dir)


class ServerHandle:
    """What a test sees of a server, whichever way it runs: where it is, its streaming
    cluster id and store. InProcessServer and SubprocessServer add how it starts and stops."""

    mode = ""

    def __init__(self, spec: ServerSpec, workdir: Path) -> None:
        self.options = spec
        self.workdir = Path(workdir)
        self._port = spec.port
        self.starts = 0

    @property
    def host(self) -> str:
        return self.options.host

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def cluster_url(self) -> str:
        """The route listener's URL (with the port it got, once started)."""
        return str(self.options.cluster or "")

    @property
    def ports(self) -> dict[str, int]:
        """The ports it listens on: "client", and "route", "websocket", "http", "https"
        when it has those listeners."""
        return {"client": self.port} if self.starts else {}

    @property
    def cluster_id(self) -> str:
        return self.options.cluster_id

    @property
    def store(self) -> str:
        return self.options.store

    @property
    def store_dir(self) -> str:
        return self.options.store_dir
