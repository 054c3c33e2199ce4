"""What the HTTP monitoring endpoints of the core and of streaming share: the reference's
time and uptime formats, JSON responses, and its paging and `subs` query parameters."""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

DEFAULT_LIST_LIMIT = 1024


def rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).astimezone().isoformat()


def uptime(secs: float) -> str:
    """As the reference writes an uptime: 1y2d3h4m5s, leading zero units left out."""
    tsecs = int(secs)
    tmins, thrs = tsecs // 60, tsecs // 3600
    tdays = thrs // 24
    tyrs = tdays // 365
    if tyrs > 0:
        return f"{tyrs}y{tdays % 365}d{thrs % 24}h{tmins % 60}m{tsecs % 60}s"
    if tdays > 0:
        return f"{tdays}d{thrs % 24}h{tmins % 60}m{tsecs % 60}s"
    if thrs > 0:
        return f"{thrs}h{tmins % 60}m{tsecs % 60}s"
    if tmins > 0:
        return f"{tmins}m{tsecs % 60}s"
    return f"{tsecs}s"


def json_response(content: Any) -> web.Response:
    from aiohttp import web  # (only a server with HTTP monitoring loads aiohttp)

    return web.Response(text=json.dumps(content, indent=2), content_type="application/json")


def offset_limit(request: web.Request) -> tuple[int, int]:
    def num(name: str) -> int:
        try:
            return int(request.query.get(name, "0"))
        except ValueError:
            return 0

    offset = max(num("offset"), 0)
    limit = num("limit")
    if limit <= 0:
        limit = DEFAULT_LIST_LIMIT
    return offset, limit


def subs_detail(request: web.Request) -> bool:
    """`subs=detail`: each subscription with its sid, queue group and counts."""
    return request.query.get("subs", "").lower() == "detail"


def subs_option(request: web.Request) -> int:
    try:
        return int(request.query.get("subs", "0"))
    except ValueError:
        return 1 if request.query.get("subs", "").lower() in ("true", "detail") else 0
