"""Per-message TTLs (`allow_msg_ttl`, `Nats-TTL`), subject delete markers
(`subject_delete_marker_ttl`) and the stream configuration's checks, on tidings and on the
reference nats-server, through raw `$JS.API` requests and nats-py publishes."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

from nats.aio.client import Client

SECOND = 10**9


async def api(nc: Client, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    msg = await nc.request(f"$JS.API.{subject}", json.dumps(body or {}).encode(), timeout=5)
    return json.loads(msg.data)


async def publish(nc: Client, subject: str, data: bytes = b"x",
                  headers: dict[str, str] | None = None) -> dict[str, Any]:
    msg = await nc.request(subject, data, headers=headers, timeout=5)
    return json.loads(msg.data)


async def messages(nc: Client, stream: str) -> int:
    return int((await api(nc, f"STREAM.INFO.{stream}"))["state"]["messages"])


async def until(check: Any, seconds: float = 10.0) -> None:
    """Wait for the server's own timers (expiry): poll the state until `check()` holds."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "the state never came"
        await asyncio.sleep(0.1)


async def test_a_message_ttl_expires_that_message_only(nc: Client) -> None:
    await api(nc, "STREAM.CREATE.TTL1", {"name": "TTL1", "subjects": ["ttl1.>"],
                                         "storage": "memory", "allow_msg_ttl": True})
    try:
        short = await publish(nc, "ttl1.a", headers={"Nats-TTL": "1s"})
        kept = await publish(nc, "ttl1.b")
        assert (short["seq"], kept["seq"]) == (1, 2)
        assert await messages(nc, "TTL1") == 2

        async def one_left() -> bool:
            return await messages(nc, "TTL1") == 1
        await until(one_left)
        got = await api(nc, "STREAM.MSG.GET.TTL1", {"seq": 2})
        assert got["message"]["subject"] == "ttl1.b"
        gone = await api(nc, "STREAM.MSG.GET.TTL1", {"seq": 1})
        assert gone["error"]["err_code"] == 10037
    finally:
        await api(nc, "STREAM.DELETE.TTL1")


async def test_a_ttl_of_never_outlives_max_age(nc: Client) -> None:
    await api(nc, "STREAM.CREATE.TTL2", {"name": "TTL2", "subjects": ["ttl2"],
                                         "storage": "memory", "allow_msg_ttl": True,
                                         "max_age": SECOND})
    try:
        await publish(nc, "ttl2", b"stays", headers={"Nats-TTL": "never"})
        await publish(nc, "ttl2", b"goes")

        async def one_left() -> bool:
            return await messages(nc, "TTL2") == 1
        await until(one_left)
        got = await api(nc, "STREAM.MSG.GET.TTL2", {"seq": 1})
        assert got["message"]["seq"] == 1
    finally:
        await api(nc, "STREAM.DELETE.TTL2")


async def test_ttl_refusals_are_the_references(nc: Client) -> None:
    await api(nc, "STREAM.CREATE.TTL3", {"name": "TTL3", "subjects": ["ttl3"],
                                         "storage": "memory"})
    await api(nc, "STREAM.CREATE.TTL4", {"name": "TTL4", "subjects": ["ttl4"],
                                         "storage": "memory", "allow_msg_ttl": True})
    try:
        disabled = await publish(nc, "ttl3", headers={"Nats-TTL": "5s"})
        assert disabled["error"] == {"code": 400, "err_code": 10166,
                                     "description": "per-message TTL is disabled"}
        for bad in ("soon", "500ms", "0"):
            invalid = await publish(nc, "ttl4", headers={"Nats-TTL": bad})
            assert invalid["error"]["err_code"] == 10165, bad
        assert (await publish(nc, "ttl4", headers={"Nats-TTL": "30"}))["seq"] == 1
        assert await messages(nc, "TTL3") == 0
        update = await api(nc, "STREAM.UPDATE.TTL4", {"name": "TTL4", "subjects": ["ttl4"],
                                                      "storage": "memory"})
        assert update["error"]["description"] == "message TTL status can not be disabled"
    finally:
        await api(nc, "STREAM.DELETE.TTL3")
        await api(nc, "STREAM.DELETE.TTL4")


async def test_an_expired_subject_leaves_a_delete_marker(nc: Client) -> None:
    created = await api(nc, "STREAM.CREATE.SDM", {
        "name": "SDM", "subjects": ["sdm.>"], "storage": "memory", "max_age": SECOND,
        "subject_delete_marker_ttl": SECOND})
    config = created["config"]
    assert (config["allow_msg_ttl"], config["allow_rollup_hdrs"]) == (True, True)
    try:
        await publish(nc, "sdm.a", b"one")
        await publish(nc, "sdm.a", b"two")
        await publish(nc, "sdm.b", b"three")

        async def markers_only() -> bool:
            info = await api(nc, "STREAM.INFO.SDM")
            return info["state"]["messages"] == 2 and info["state"]["first_seq"] > 3
        await until(markers_only)
        marker = (await api(nc, "STREAM.MSG.GET.SDM", {"last_by_subj": "sdm.a"}))["message"]
        headers = base64.b64decode(marker["hdrs"])
        assert b"Nats-Marker-Reason: MaxAge\r\n" in headers
        assert b"Nats-TTL: 1s\r\n" in headers
        assert "data" not in marker

        async def empty() -> bool:
            return await messages(nc, "SDM") == 0
        await until(empty)
    finally:
        await api(nc, "STREAM.DELETE.SDM")


async def test_an_expiring_kv_purge_leaves_no_marker(nc: Client) -> None:
    """A KV purge (`KV-Operation: PURGE`) counts as a delete marker: when its TTL ends the
    subject is gone, with no marker in its place (nats.js' "get entry ttl markerTTL")."""
    await api(nc, "STREAM.CREATE.KVP", {
        "name": "KVP", "subjects": ["kvp.>"], "storage": "memory", "allow_msg_ttl": True,
        "allow_rollup_hdrs": True, "subject_delete_marker_ttl": SECOND})
    try:
        await publish(nc, "kvp.a", b"value")
        await publish(nc, "kvp.a", b"", headers={"KV-Operation": "PURGE", "Nats-Rollup": "sub",
                                                 "Nats-TTL": "1s"})
        assert await messages(nc, "KVP") == 1

        async def empty() -> bool:
            return await messages(nc, "KVP") == 0
        await until(empty)
        info = await api(nc, "STREAM.INFO.KVP")
        assert info["state"]["last_seq"] == 2  # (no marker was stored after the purge)
    finally:
        await api(nc, "STREAM.DELETE.KVP")


async def test_configuration_checks_are_the_references(nc: Client) -> None:
    cases = [
        ({"discard_new_per_subject": True, "max_msgs_per_subject": 1},
         "discard new per subject requires discard new policy to be set"),
        ({"discard_new_per_subject": True, "discard": "new"},
         "discard new per subject requires max msgs per subject > 0"),
        ({"max_age": SECOND // 20}, "max age needs to be >= 100ms"),
        ({"max_age": SECOND, "duplicate_window": 2 * SECOND},
         "duplicates window can not be larger then max age"),
        ({"deny_purge": True, "allow_rollup_hdrs": True},
         "roll-ups require the purge permission"),
        ({"subject_delete_marker_ttl": SECOND // 2},
         "subject delete marker TTL must be at least 1 second"),
    ]
    for extra, words in cases:
        got = await api(nc, "STREAM.CREATE.CHECK", {"name": "CHECK", "subjects": ["check"],
                                                    "storage": "memory", **extra})
        assert got["error"]["err_code"] == 10052, extra
        assert got["error"]["description"].endswith(words), got
    await api(nc, "STREAM.CREATE.CHECK", {"name": "CHECK", "subjects": ["check"],
                                          "storage": "memory", "deny_delete": True})
    try:
        for extra, words in [({"storage": "file"}, "can not change storage type"),
                             ({"deny_delete": False}, "can not cancel deny message deletes")]:
            got = await api(nc, "STREAM.UPDATE.CHECK", {
                "name": "CHECK", "subjects": ["check"], "storage": "memory",
                "deny_delete": True, **extra})
            assert got["error"]["description"].endswith(words), got
    finally:
        await api(nc, "STREAM.DELETE.CHECK")
