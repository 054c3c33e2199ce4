"""A client as the reference's ClientInfo describes it (events.go), in its key order: the
system account's events, a service import's `Nats-Request-Info` header and the latency
metrics of a service export all carry one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import gojson

if TYPE_CHECKING:
    from .client import ClientConnection


def go_time(ts: float) -> str:
    """A time in seconds (to the microsecond) as Go's JSON writes it, in UTC."""
    return gojson.go_time(round(ts * 1e6) * 1000, utc=True)


def client_info(c: ClientConnection, detailed: bool = True, *, rtt: bool = True,
                stop: float = 0.0, where: bool = False, event: bool = False) -> dict[str, Any]:
    """`c`'s ClientInfo: its account and round trip only, unless `detailed` (the
    reference's getClientInfo(true)); `where` adds the server's name and cluster; `stop`:
    when it went; `rtt` False leaves the round trip out. The name tag of an `event` (a
    connect or disconnect) is its account's, else its user JWT's name."""
    if not detailed:
        info: dict[str, Any] = {"acc": c.account.name}
        if rtt and c.rtt:
            info["rtt"] = int(c.rtt * 1e9)
        return info
    info = {"start": go_time(c.started), "host": c.host, "id": c.cid, "acc": c.account.name}
    user = c.authorized_user()
    if user:
        info["user"] = user
    for key, value in (("name", c.name), ("lang", c.lang), ("ver", c.version)):
        if value:
            info[key] = value
    if rtt and c.rtt:
        info["rtt"] = int(c.rtt * 1e9)
    if where:
        server = c.server
        info["server"] = server.name
        if server.cluster is not None:
            info["cluster"] = server.cluster.name
    if stop:
        info["stop"] = go_time(stop)
    if c.login.nkey and c.login.account is not None:
        info["issuer_key"] = c.account.name  # (an NKey user's: its account)
    name_tag = (c.account.name_tag or c.account.name) if event else c.login.name_tag
    if name_tag:
        info["name_tag"] = name_tag
    info.update(kind="Client", client_type="websocket" if c.websocket else "nats")
    return info
