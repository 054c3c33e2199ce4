"""What the mirror and source tests share: a JetStream API request, polling until the
copies are made (on the server's own time), a stream's messages read back one by one."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

from nats.aio.client import Client


async def api(nc: Client, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    msg = await nc.request(f"$JS.API.{subject}", json.dumps(body or {}).encode(), timeout=5)
    return json.loads(msg.data)


async def until(check: Any, seconds: float = 20.0) -> Any:
    """Poll the server's state until `check()` gives something true."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not (result := await check()):
        assert asyncio.get_running_loop().time() < deadline, "the copies never came"
        await asyncio.sleep(0.05)
    return result


async def in_step(nc: Client, stream: str, last_seq: int, seconds: float = 20.0
                  ) -> dict[str, Any]:
    """`stream`'s info once its last sequence reached `last_seq`."""
    async def caught_up() -> dict[str, Any] | None:
        info = await api(nc, f"STREAM.INFO.{stream}")
        return info if info["state"]["last_seq"] >= last_seq else None
    return await until(caught_up, seconds)  # type: ignore[no-any-return]


async def messages(nc: Client, stream: str) -> list[dict[str, Any]]:
    """Every message of `stream` (subject, seq, headers, data, time) by STREAM.MSG.GET."""
    state = (await api(nc, f"STREAM.INFO.{stream}"))["state"]
    out = []
    for seq in range(state["first_seq"], state["last_seq"] + 1):
        got = await api(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq})
        if "message" in got:
            msg = got["message"]
            msg["hdrs"] = base64.b64decode(msg.get("hdrs", "")).decode()
            out.append(msg)
    return out
