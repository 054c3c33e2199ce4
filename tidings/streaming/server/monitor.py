"""The reference's monitoring endpoints: /streaming/serverz, storez, clientsz, channelsz.

Field names, query parameters (``?client=``, ``?channel=``, ``?subs=1``, ``offset``,
``limit``) and the 404 texts are the reference server's. :func:`add_routes` mounts them on
any aiohttp application; :func:`start_monitor` serves them on their own port.
"""

from __future__ import annotations

import logging
import os
import platform
import resource
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ...monitoring import json_response, offset_limit, rfc3339, subs_option, uptime
from ...oserrors import listen_error
from .server import StreamingServer
from .state import Client, Sub

log = logging.getLogger("tidings.streaming")


def subscriptionz(sub: Sub) -> dict[str, Any]:
    out: dict[str, Any] = {
        "client_id": sub.client_id or sub.saved_client_id,
        "inbox": sub.inbox,
        "ack_inbox": sub.ack_inbox,
    }
    if sub.durable_name:
        out["durable_name"] = sub.durable_name
    if sub.qgroup:
        out["queue_name"] = sub.qgroup
    out.update(
        is_durable=sub.is_durable,
        is_offline=not sub.client_id,
        max_inflight=sub.max_in_flight,
        ack_wait=sub.ack_wait,
        last_sent=sub.last_sent,
        pending_count=len(sub.pending),
        is_stalled=sub.stalled,
    )
    return out


def _client_subs(client: Client) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for sub in client.subs:
        out.setdefault(sub.channel.name, []).append(subscriptionz(sub))
    return out


def _clientz(client: Client, subs: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": client.id,
        "hb_inbox": client.hb_inbox,
        "subs_count": len(client.subs),
    }
    if subs == 1 and client.subs:
        out["subscriptions"] = _client_subs(client)
    return out


def _limits(s: StreamingServer) -> dict[str, Any]:
    lim = s.store.limits

    def chan(cl: Any, inactivity: float | None) -> dict[str, Any]:
        def v(x: Any) -> Any:
            return 0 if x is None else (-1 if x == 0 else x)

        return {
            "max_msgs": v(cl.max_msgs),
            "max_bytes": v(cl.max_bytes),
            "max_age": int(v(cl.max_age) * 1e9) if cl.max_age else v(cl.max_age),
            "max_subscriptions": v(cl.max_subs),
            "max_inactivity": int((inactivity or 0) * 1e9),
        }

    out: dict[str, Any] = {
        "max_channels": lim.max_channels,
        "max_msgs": lim.max_msgs,
        "max_bytes": lim.max_bytes,
        "max_age": int(lim.max_age * 1e9),
        "max_subscriptions": lim.max_subs,
        "max_inactivity": int(s.opts.max_inactivity * 1e9),
    }
    if lim.channels:
        out["channels"] = {
            name: chan(cl, s.opts.channel_inactivity.get(name))
            for name, cl in lim.channels.items()
        }
    return out


def _fds() -> tuple[int, int]:
    try:
        n = len(os.listdir("/proc/self/fd"))
    except OSError:
        n = 0
    return n, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


Handler = Callable[[web.Request], Awaitable[web.Response]]


def add_routes(app: web.Application, s: StreamingServer) -> None:
    """Mount /streaming, /streaming/serverz, storez, clientsz, channelsz on ``app``."""
    for path, handler in routes(s).items():
        app.router.add_get(path, handler)


def routes(s: StreamingServer) -> dict[str, Handler]:
    """The streaming endpoints by path (the core server's monitor serves them when
    streaming is embedded)."""

    def header() -> dict[str, Any]:
        return {"cluster_id": s.opts.cluster_id, "server_id": s.server_id,
                "now": rfc3339(time.time())}

    async def rootz(request: web.Request) -> web.Response:
        links = "".join(
            f'<a href=./streaming/{p}>{t}</a><br/>'
            for p, t in (("serverz", "server"), ("storez", "store"), ("clientsz", "clients"),
                         ("channelsz", "channels"))
        )
        return web.Response(text=f"<html><body>{links}</body></html>", content_type="text/html")

    async def serverz(request: web.Request) -> web.Response:
        msgs, nbytes = s.msgs_state()
        now = time.time()
        fds, max_fds = _fds()
        out = {
            "cluster_id": s.opts.cluster_id,
            "server_id": s.server_id,
            "version": s.version,
            "go": f"python {platform.python_version()}",
            "state": s.state,
            "now": rfc3339(now),
            "start_time": rfc3339(s.start_time),
            "uptime": uptime(now - s.start_time),
            "clients": len(s.clients),
            "subscriptions": s.num_subs(),
            "channels": len(s.channels),
            "total_msgs": msgs,
            "total_bytes": nbytes,
            "in_msgs": s.in_msgs,
            "in_bytes": s.in_bytes,
            "out_msgs": s.out_msgs,
            "out_bytes": s.out_bytes,
        }
        if fds:
            out["open_fds"] = fds
            out["max_fds"] = max_fds
        return json_response(out)

    async def storez(request: web.Request) -> web.Response:
        msgs, nbytes = s.msgs_state()
        out = header()
        out.update(type=s.store.kind.upper(), limits=_limits(s), total_msgs=msgs,
                   total_bytes=nbytes)
        return json_response(out)

    async def clientsz(request: web.Request) -> web.Response:
        subs = subs_option(request)
        one = request.query.get("client", "")
        if one:
            client = s.clients.get(one)
            if client is None:
                raise web.HTTPNotFound(text=f"Client {one} not found\n")
            return json_response(_clientz(client, subs))
        offset, limit = offset_limit(request)
        ids = sorted(s.clients)
        page = ids[min(offset, len(ids)):min(offset + limit, len(ids))]
        clients = [_clientz(s.clients[i], subs) for i in page if i in s.clients]
        out = header()
        out.update(offset=offset, limit=limit, count=len(clients), total=len(ids),
                   clients=clients)
        return json_response(out)

    def channelz(name: str, subs: int) -> dict[str, Any] | None:
        ch = s.channels.get(name)
        if ch is None:
            return None
        info = s.store.channel_info(name)
        all_subs = ch.all_subs()
        out: dict[str, Any] = {
            "name": name,
            "msgs": info.msgs,
            "bytes": info.bytes,
            "first_seq": 0 if info.last_seq == 0 else info.first_seq,
            "last_seq": info.last_seq,
            "subs_count": len(all_subs),
        }
        if subs == 1:
            out["subscriptions"] = [subscriptionz(sub) for sub in all_subs]
        return out

    async def channelsz(request: web.Request) -> web.Response:
        subs = subs_option(request)
        one = request.query.get("channel", "")
        if one:
            cz = channelz(one, subs)
            if cz is None:
                raise web.HTTPNotFound(text=f"Channel {one} not found\n")
            return json_response(cz)
        offset, limit = offset_limit(request)
        names = sorted(s.channels)
        page = names[min(offset, len(names)):min(offset + limit, len(names))]
        out = header()
        out.update(offset=offset, limit=limit, total=len(names))
        if subs == 1:
            chans = [c for c in (channelz(n, subs) for n in page) if c is not None]
            out.update(count=len(chans), channels=chans)
        else:
            out.update(count=len(page), names=page)
        return json_response(out)

    async def is_ft_active(request: web.Request) -> web.Response:
        # As the reference: 200 for the active server of an FT group, 204 otherwise.
        return web.Response(status=200 if s.state == "FT_ACTIVE" else 204)

    return {
        "/streaming": rootz,
        "/streaming/serverz": serverz,
        "/streaming/storez": storez,
        "/streaming/clientsz": clientsz,
        "/streaming/channelsz": channelsz,
        "/streaming/isFTActive": is_ft_active,
    }


def standby_routes(cluster_id: str, version: str) -> dict[str, Handler]:
    """What a standby server of an FT group serves before it has a store: /serverz with
    state FT_STANDBY (and nothing counted yet) and /isFTActive (204)."""
    started = time.time()

    async def serverz(request: web.Request) -> web.Response:
        now = time.time()
        return json_response({
            "cluster_id": cluster_id, "server_id": "", "version": version,
            "go": f"python {platform.python_version()}", "state": "FT_STANDBY",
            "now": rfc3339(now), "start_time": rfc3339(started),
            "uptime": uptime(now - started), "clients": 0, "subscriptions": 0, "channels": 0,
            "total_msgs": 0, "total_bytes": 0, "in_msgs": 0, "in_bytes": 0, "out_msgs": 0,
            "out_bytes": 0,
        })

    async def is_ft_active(request: web.Request) -> web.Response:
        return web.Response(status=204)

    return {"/streaming/serverz": serverz, "/streaming/isFTActive": is_ft_active}


async def start_monitor(s: StreamingServer, host: str, port: int) -> web.AppRunner:
    """Serve the endpoints on host:port; returns the runner (``await runner.cleanup()``)."""
    return await serve_routes(routes(s), host, port)


async def serve_routes(paths: dict[str, Handler], host: str, port: int) -> web.AppRunner:
    """Serve `paths` on host:port (-1: any free port); returns the runner (``await
    runner.cleanup()``). The port it got is logged as the core server logs its own."""
    app = web.Application()
    for path, handler in paths.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, max(port, 0), reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise listen_error("can't start streaming monitoring: can't listen to the monitor port",
                           host, port, exc) from exc
    log.info("Starting http monitor on %s:%d", host, runner.addresses[0][1])
    return runner
