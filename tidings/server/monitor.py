"""nats-server's monitoring endpoints on `-m PORT`: /varz, /connz, /subsz, /routez, /healthz,
/accountz, /metrics (Prometheus) and a page at / linking them, with the reference's field names and types (what
dashboards and the Prometheus NATS exporter read). When streaming is embedded, its
/streaming/* endpoints are served here too (`Server.monitor_routes`).

Counters are true: messages the parser's fast path skipped (nobody listened) count in
in_msgs/in_bytes, and connections that have closed still count in the server's totals.
"""

from __future__ import annotations

import os
import resource
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ..monitoring import json_response, offset_limit, rfc3339, subs_detail, subs_option, uptime
from ..protocol.subjects import is_valid_literal_subject, subject_matches
from ..redact import url_host

if TYPE_CHECKING:
    from .connection import Connection
    from .server import Server

Handler = Callable[[web.Request], Awaitable[web.Response]]
ENDPOINTS = ("varz", "connz", "routez", "subsz", "accountz", "healthz", "metrics")
_NS = 1_000_000_000


def _rtt(conn: Connection) -> str:
    rtt = conn.rtt
    if not rtt:
        return "0s"
    if rtt < 1e-3:
        return f"{rtt * 1e6:.0f}µs"
    if rtt < 1:
        return f"{rtt * 1e3:.3f}ms"
    return f"{rtt:.3f}s"


def _rss() -> int:
    try:
        with open(f"/proc/{os.getpid()}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Monitor:
    """The endpoints of one server, and the counters of requests to them."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.requests: dict[str, int] = {}
        self._runner: web.AppRunner | None = None
        self.bound: tuple[Any, ...] = ()  # the address it listens on (the port -1 picked)
        self._cpu = (time.monotonic(), time.process_time())

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
            return await handler(request)

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
        return web.Response(text='{"status":"ok"}', content_type="application/json")

    async def varz(self, request: web.Request) -> web.Response:
        s = self.server
        o = s.options
        info = s.info_fields()
        totals = s.message_totals()
        clients = [c for cid, c in s.clients.items() if cid not in s.internal]
        now = time.time()
        mono, cpu = time.monotonic(), time.process_time()
        then_mono, then_cpu = self._cpu
        self._cpu = (mono, cpu)
        cpu_pct = round(100 * (cpu - then_cpu) / (mono - then_mono), 2) if mono > then_mono else 0
        cluster: dict[str, Any] = {}
        if s.cluster is not None:
            cluster = {"name": s.cluster.name, "addr": s.cluster.listen.host,
                       "cluster_port": s.cluster.port, "auth_timeout": o.auth_timeout,
                       # As the reference: host:port only (never a route's credentials).
                       **({"urls": [url_host(u) for u in o.routes]} if o.routes else {}),
                       "tls_timeout": o.cluster_tls.timeout if o.cluster_tls else 2}
        varz = {
            "server_id": s.server_id, "server_name": s.name, "version": info["version"],
            "proto": info["proto"], "go": info["go"], "host": o.host, "port": s.port,
            **{k: True for k in ("auth_required", "tls_required", "tls_verify") if info.get(k)},
            # The client URLs of the cluster (this server's first), as INFO gives them.
            **({"connect_urls": list(s.connect_urls)} if s.connect_urls else {}),
            "max_connections": o.max_connections, "ping_interval": int(o.ping_interval * _NS),
            "ping_max": o.ping_max, "http_host": o.http_host or o.host, "http_port": o.http_port,
            "http_base_path": "", "https_port": o.https_port, "auth_timeout": o.auth_timeout,
            "max_control_line": o.max_control_line, "max_payload": o.max_payload,
            "max_pending": o.max_pending, "cluster": cluster, "gateway": {}, "leaf": {},
            "mqtt": {}, "websocket": {}, "jetstream": {},
            "tls_timeout": o.tls.timeout if o.tls else 2,
            "write_deadline": int(o.write_deadline * _NS), "start": rfc3339(s.started),
            "now": rfc3339(now), "uptime": uptime(now - s.started), "mem": _rss(),
            "cores": os.cpu_count() or 1, "gomaxprocs": os.cpu_count() or 1, "cpu": cpu_pct,
            "connections": len(clients), "total_connections": s.total_connections,
            "routes": len(s.cluster.routes) if s.cluster is not None else 0, "remotes": 0,
            "leafnodes": 0, **totals, "slow_consumers": s.slow_consumers,
            "stale_connections": sum(s.stale.values()), "stalled_clients": s.stalls,
            "subscriptions": s.sublist.count,
            "http_req_stats": dict(self.requests),
            "config_load_time": rfc3339(s.started),
            **({"tags": list(o.tags)} if o.tags else {}),
            "slow_consumer_stats": {"clients": s.slow_consumers, "routes": 0, "gateways": 0,
                                    "leafs": 0},
            "stale_connection_stats": {**s.stale, "gateways": 0, "leafs": 0},
        }
        return json_response(varz)

    async def connz(self, request: web.Request) -> web.Response:
        s = self.server
        offset, limit = offset_limit(request)
        subs = subs_option(request)
        now = time.time()
        conns = [c for cid, c in s.clients.items() if cid not in s.internal]
        sort = request.query.get("sort", "cid")
        key = _SORTS.get(sort)
        if key is None:
            raise web.HTTPBadRequest(text=f"Invalid sorting option: {sort}")
        conns.sort(key=lambda c: key(c, now), reverse=sort not in ("cid", "start"))
        state = request.query.get("state", "open").lower()
        if state not in ("open", "closed", "all", "any"):
            raise web.HTTPBadRequest(text=f"Invalid connection state: {state}")
        if state == "open":  # only the page is described
            total = len(conns)
            items = [client_item(c, now) for c in conns[offset : offset + limit]]
        else:
            listed = ([] if state == "closed" else [client_item(c, now) for c in conns])
            listed += s.closed_clients
            total = len(listed)
            items = [dict(item) for item in listed[offset : offset + limit]]
        auth = request.query.get("auth", "").lower() in ("1", "true")
        detail = subs_detail(request)
        out = []
        for item in items:
            listed = item.pop("subscriptions_list", [])
            if listed and detail:
                item["subscriptions_list_detail"] = listed
            elif listed and subs:
                item["subscriptions_list"] = [sub["subject"] for sub in listed]
            if not auth:
                item.pop("authorized_user", None)
            out.append(item)
        return json_response({
            "server_id": s.server_id, "now": rfc3339(now), "num_connections": len(out),
            "total": total, "offset": offset, "limit": limit, "connections": out,
        })

    async def routez(self, request: web.Request) -> web.Response:
        s = self.server
        subs = subs_option(request)
        routes = []
        if s.cluster is not None:
            for r in s.cluster.routes.values():
                in_msgs, in_bytes = r.published()
                item: dict[str, Any] = {
                    "rid": r.cid, "remote_id": r.remote_id, "remote_name": r.remote_name,
                    "did_solicit": bool(r.url), "is_configured": bool(r.url and not r.implicit),
                    "ip": r.host, "port": r.port, "start": rfc3339(r.started),
                    "last_activity": rfc3339(_last(r)), "rtt": _rtt(r),
                    "uptime": uptime(time.time() - r.started),
                    "idle": uptime(time.time() - _last(r)),
                    "pending_size": r.transport.get_write_buffer_size() if r.transport else 0,
                    "in_msgs": in_msgs, "out_msgs": r.out_msgs, "in_bytes": in_bytes,
                    "out_bytes": r.out_payload, "subscriptions": len(r.subs),
                }
                if r.subs and subs_detail(request):
                    item["subscriptions_list_detail"] = [sub_detail(sub, r.cid)
                                                         for sub in r.subs.values()]
                elif r.subs and subs:
                    item["subscriptions_list"] = [sub.subject.decode(errors="replace")
                                                  for sub in r.subs.values()]
                routes.append(item)
        return json_response({"server_id": s.server_id, "server_name": s.name,
                              "now": rfc3339(time.time()), "num_routes": len(routes),
                              "routes": routes})

    async def subsz(self, request: web.Request) -> web.Response:
        """The index's numbers (SublistStats); with `subs=1` the clients' subscriptions,
        those matching `test` (a subject) only when given."""
        s = self.server
        offset, limit = offset_limit(request)
        test = request.query.get("test", "")
        if test and not is_valid_literal_subject(test):
            raise web.HTTPBadRequest(
                text=f"invalid test subject, must be valid publish subject: {test}")
        body: dict[str, Any] = {
            "server_id": s.server_id, "now": rfc3339(time.time()),
            **s.sublist.stats(s.message_totals()["in_msgs"]),
            "total": 0, "offset": offset, "limit": limit,
        }
        if subs_option(request):
            subs = [{"account": "$G", "account_tag": "$G", **sub_detail(sub, c.cid)}
                    for c in s.clients.values() for sub in c.subs.values()
                    if not test or subject_matches(sub.subject, test.encode())]
            body["total"] = len(subs)
            page = subs[offset : offset + limit]
            if page:
                body["subscriptions_list"] = page
        return json_response(body)

    async def metrics(self, request: web.Request) -> web.Response:
        """/varz's numbers in Prometheus' text format, named as the NATS exporter names
        them (gnatsd_varz_*)."""
        s = self.server
        values: dict[str, tuple[str, float]] = {
            "connections": ("gauge", sum(1 for cid in s.clients if cid not in s.internal)),
            "total_connections": ("counter", s.total_connections),
            "subscriptions": ("gauge", s.sublist.count),
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

    async def accountz(self, request: web.Request) -> web.Response:
        s = self.server
        return json_response({"server_id": s.server_id, "now": rfc3339(time.time()),
                              "accounts": ["$G"]})


def client_item(c: Any, now: float, stop: float = 0.0, reason: str = "") -> dict[str, Any]:
    """One connection as /connz shows it (closed ones with when and why)."""
    in_msgs, in_bytes = c.published()
    transport = c.transport
    item: dict[str, Any] = {
        "cid": c.cid, "kind": "Client", "type": "nats", "ip": c.host, "port": c.port,
        "start": rfc3339(c.started), "last_activity": rfc3339(_last(c)),
    }
    if stop:
        item["stop"] = rfc3339(stop)
        item["reason"] = reason
    item.update({
        "rtt": _rtt(c), "uptime": uptime((stop or now) - c.started),
        "idle": uptime((stop or now) - _last(c)),
        "pending_bytes": transport.get_write_buffer_size() if transport and not stop else 0,
        "in_msgs": in_msgs, "out_msgs": c.out_msgs, "in_bytes": in_bytes,
        "out_bytes": c.out_payload, "subscriptions": len(c.subs),
    })
    for field in ("name", "lang", "version"):
        value = getattr(c, field, "")
        if value:
            item[field] = value
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is not None:
        item["tls_version"] = (ssl_object.version() or "").replace("TLSv", "")
        item["tls_cipher_suite"] = (ssl_object.cipher() or ("",))[0]
    user = c.authorized_user()
    if user:
        item["authorized_user"] = user  # shown with ?auth=1 only (connz)
    # Each subscription in detail; connz shows them so (subs=detail), or their subjects.
    item["subscriptions_list"] = [sub_detail(sub, c.cid) for sub in c.subs.values()]
    return item


def sub_detail(sub: Any, cid: int) -> dict[str, Any]:
    """A subscription as the reference's SubDetail shows it (no account: connz, routez)."""
    detail: dict[str, Any] = {"subject": sub.subject.decode(errors="replace")}
    if sub.queue:
        detail["qgroup"] = sub.queue.decode(errors="replace")
    detail["sid"] = sub.sid.decode(errors="replace")
    detail["msgs"] = sub.delivered
    if sub.max:
        detail["max"] = sub.max
    detail["cid"] = cid
    return detail


def _last(conn: Connection) -> float:
    """Wall-clock time of the connection's last input."""
    return time.time() - (time.monotonic() - conn.last_in) if conn.last_in else conn.started


_SORTS: dict[str, Callable[[Any, float], Any]] = {
    "cid": lambda c, now: c.cid,
    "start": lambda c, now: c.started,
    "subs": lambda c, now: len(c.subs),
    "pending": lambda c, now: c.transport.get_write_buffer_size() if c.transport else 0,
    "msgs_to": lambda c, now: c.out_msgs,
    "msgs_from": lambda c, now: c.published()[0],
    "bytes_to": lambda c, now: c.out_payload,
    "bytes_from": lambda c, now: c.published()[1],
    "last": lambda c, now: _last(c),
    "idle": lambda c, now: now - _last(c),
    "uptime": lambda c, now: now - c.started,
}
