"""nats-server's monitoring endpoints on `-m PORT`: /varz, /connz, /subsz, /routez, /healthz,
/accountz, /accstatz, /jsz, /metrics (Prometheus) and a page at / linking them, with the
reference's field names and types (what dashboards and the Prometheus NATS exporter read).
When streaming is embedded, its /streaming/* endpoints are served here too
(`Server.monitor_routes`).

The HTTP handlers turn a query into the endpoint's options and answer what endpoints.py
produces from them (the system account's requests answer the same); an endpoint that
refuses its options is a 400 with the reference's words.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ..monitoring import json_response
from .endpoints import _STATES, OPEN, EndpointError, Endpoints, _rss

if TYPE_CHECKING:
    from .server import Server

Handler = Callable[[web.Request], Awaitable[web.Response]]
ENDPOINTS = ("varz", "connz", "routez", "subsz", "accountz", "accstatz", "jsz", "healthz",
             "metrics")


class Monitor:
    """The HTTP endpoints of one server."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.endpoints = Endpoints(server)
        self.requests = self.endpoints.requests
        self._runner: web.AppRunner | None = None
        self.bound: tuple[Any, ...] = ()  # the address it listens on (the port -1 picked)

    async def start(self, sock: socket.socket, secure: bool = False) -> None:
        """Serve the endpoints on `sock`, a listening socket (binding.py), which is closed if
        they cannot be; `secure`: over TLS (-ms, the server's certificate, no client
        certificate asked for)."""
        try:
            context = None
            if secure and self.server.options.tls is not None:
                from .tls import monitor_context

                context = monitor_context(self.server.options.tls)
            app = web.Application()
            app.router.add_get("/", self.root)
            for name in ENDPOINTS:
                app.router.add_get(f"/{name}", self._counted(name, getattr(self, name)))
            app.router.add_get("/streaming{rest:.*}", self.extra)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            await web.SockSite(self._runner, sock, ssl_context=context).start()
        except BaseException:
            sock.close()
            raise
        self.bound = sock.getsockname()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _counted(self, name: str, handler: Handler) -> Handler:
        async def counted(request: web.Request) -> web.Response:
            path = f"/{name}"
            self.requests[path] = self.requests.get(path, 0) + 1
            try:
                return await handler(request)
            except EndpointError as exc:
                return web.Response(status=400, text=str(exc))

        return counted

    async def extra(self, request: web.Request) -> web.Response:
        handler = self.server.monitor_routes.get(request.path.rstrip("/") or "/")
        if handler is None:
            raise web.HTTPNotFound()
        return await handler(request)

    # -- endpoints ------------------------------------------------------------------------
    async def root(self, request: web.Request) -> web.Response:
        links = "".join(f'<a href=./{name}>{name}</a><br/>' for name in ENDPOINTS)
        if self.server.monitor_routes:
            links += '<a href=./streaming>streaming</a><br/>'
        return web.Response(text=f"<html><body><h1>tidings</h1>{links}</body></html>",
                            content_type="text/html")

    async def healthz(self, request: web.Request) -> web.Response:
        q = request.query
        health = self.endpoints.healthz({
            **{k: _flag(q, k) for k in ("js-enabled", "js-enabled-only", "js-server-only",
                                        "js-meta-only", "details")},
            **{k: q.get(k, "") for k in ("account", "stream", "consumer")}})
        code = health.pop("status_code")  # (the HTTP status says it)
        return web.json_response(health, status=code, dumps=_compact)

    async def varz(self, request: web.Request) -> web.Response:
        return json_response(self.endpoints.varz({}))

    async def connz(self, request: web.Request) -> web.Response:
        q = request.query
        state_text = q.get("state", "")
        state = _STATES.get(state_text.lower(), -1) if state_text else OPEN
        if state < 0:
            raise EndpointError(f"Error decoding state for {state_text}")
        detail = q.get("subs", "").lower() == "detail"
        opts = {"sort": q.get("sort", ""), "auth": _flag(q, "auth"),
                "subscriptions": not detail and _flag(q, "subs"),
                "subscriptions_detail": detail, "offset": _int(q, "offset"),
                "limit": _int(q, "limit"), "cid": _int(q, "cid"), "state": state,
                "user": q.get("user", ""), "acc": q.get("acc", ""),
                "mqtt_client": q.get("mqtt_client", "")}
        return json_response(self.endpoints.connz(opts))

    async def routez(self, request: web.Request) -> web.Response:
        q = request.query
        detail = q.get("subs", "").lower() == "detail"
        return json_response(self.endpoints.routez({
            "subscriptions": not detail and _flag(q, "subs"),
            "subscriptions_detail": detail}))

    async def subsz(self, request: web.Request) -> web.Response:
        q = request.query
        return json_response(self.endpoints.subsz({
            "subscriptions": _flag(q, "subs"), "offset": _int(q, "offset"),
            "limit": _int(q, "limit"), "account": q.get("acc", ""), "test": q.get("test", "")}))

    async def accountz(self, request: web.Request) -> web.Response:
        return json_response(self.endpoints.accountz({"account": request.query.get("acc", "")}))

    async def jsz(self, request: web.Request) -> web.Response:
        """JetStream's numbers; its query's words as the reference's (`consumers`,
        `direct-consumers`, `leader-only`, ...), each checked in its order."""
        q = request.query
        opts: dict[str, Any] = {"account": q.get("acc", "")}
        for word in ("accounts", "streams", "consumers", "direct-consumers", "config",
                     "offset", "limit", "leader-only", "raft", "stream-leader-only"):
            key = _JSZ_KEYS.get(word, word.replace("-", "_"))
            opts[key] = _go_int(q, word) if word in ("offset", "limit") else _flag(q, word)
        return json_response(self.endpoints.jsz(opts))

    async def accstatz(self, request: web.Request) -> web.Response:
        return json_response(self.endpoints.accstatz(
            {"include_unused": _flag(request.query, "unused")}))

    async def metrics(self, request: web.Request) -> web.Response:
        """/varz's numbers in Prometheus' text format, named as the NATS exporter names
        them (gnatsd_varz_*)."""
        s = self.server
        values: dict[str, tuple[str, float]] = {
            "connections": ("gauge", sum(1 for cid in s.clients if cid not in s.internal)),
            "total_connections": ("counter", s.total_connections),
            "subscriptions": ("gauge", self.endpoints.num_subscriptions()),
            "slow_consumers": ("counter", s.slow_consumers),
            "routes": ("gauge", len(s.cluster.routes) if s.cluster is not None else 0),
            "mem": ("gauge", _rss()),
            "max_payload": ("gauge", s.options.max_payload),
            "uptime_seconds": ("counter", round(time.time() - s.started, 3)),
        }
        for key, value in s.message_totals().items():
            values[key] = ("counter", value)
        lines = []
        for key, (kind, value) in values.items():
            name = f"gnatsd_varz_{key}"
            lines.append(f"# TYPE {name} {kind}")
            lines.append(f'{name}{{server_id="{s.server_id}"}} {value}')
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _flag(query: Any, name: str) -> bool:
    """A boolean query parameter, as the reference reads it (Go's ParseBool)."""
    text = query.get(name, "")
    if text in ("", "0", "f", "F", "false", "FALSE", "False"):
        return False
    if text in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    raise EndpointError(f"Error decoding boolean for '{name}': strconv.ParseBool: parsing "
                        f'"{text}": invalid syntax')


# The query's words for JSzOptions' fields whose JSON name differs.
_JSZ_KEYS = {"consumers": "consumer", "direct-consumers": "direct_consumer"}


def _go_int(query: Any, name: str) -> int:
    """An integer query parameter as the reference reads it (Go's strconv.Atoi, refused
    with its words)."""
    text = query.get(name, "")
    if not text:
        return 0
    digits = text[1:] if text[0] in "+-" else text
    if not digits or not digits.isascii() or not digits.isdigit():
        reason = "invalid syntax"
    elif not -2**63 <= int(text) < 2**63:
        reason = "value out of range"
    else:
        return int(text)
    raise EndpointError(f"Error decoding int for '{name}': strconv.Atoi: parsing "
                        f'"{text}": {reason}')


def _int(query: Any, name: str) -> int:
    try:
        return int(query.get(name, "0") or "0")
    except ValueError:
        return 0
