"""A stream's `republish` (with the reference's Nats-Stream/-Subject/-Sequence/-Time-Stamp/
-Last-Sequence headers, headers only), its input `subject_transform`, and a last-message
get by a wildcard subject (as the object store lists), on tidings and on the reference."""

from __future__ import annotations

import json
from typing import Any

from nats.aio.client import Client


async def api(nc: Client, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    msg = await nc.request(f"$JS.API.{subject}", json.dumps(body or {}).encode(), timeout=5)
    return json.loads(msg.data)


async def test_republish_carries_where_the_message_is_stored(nc: Client) -> None:
    await api(nc, "STREAM.CREATE.RP", {
        "name": "RP", "subjects": ["rp.>"], "storage": "memory",
        "republish": {"src": "rp.*", "dest": "out.$1"}})
    await api(nc, "STREAM.CREATE.RPH", {
        "name": "RPH", "subjects": ["rph"], "storage": "memory",
        "republish": {"src": "rph", "dest": "outh", "headers_only": True}})
    try:
        sub = await nc.subscribe("out.>")
        subh = await nc.subscribe("outh")
        await nc.request("rp.a", b"one", headers={"X": "1"}, timeout=5)
        await nc.request("rp.a", b"two", timeout=5)
        await nc.request("rp.a.deep", b"not republished", timeout=5)
        await nc.request("rph", b"12345", timeout=5)
        first, second = await sub.next_msg(5), await sub.next_msg(5)
        assert (first.subject, first.data, second.data) == ("out.a", b"one", b"two")
        assert first.headers is not None and second.headers is not None
        assert first.headers["X"] == "1"
        assert (first.headers["Nats-Stream"], first.headers["Nats-Subject"],
                first.headers["Nats-Sequence"], first.headers["Nats-Last-Sequence"]) == (
            "RP", "rp.a", "1", "0")
        assert (second.headers["Nats-Sequence"], second.headers["Nats-Last-Sequence"]) == (
            "2", "1")
        assert first.headers["Nats-Time-Stamp"].endswith("Z")
        only = await subh.next_msg(5)
        assert only.data == b"" and only.headers is not None
        assert only.headers["Nats-Msg-Size"] == "5"
        await nc.flush()
        assert sub.pending_msgs == 0  # rp.a.deep is not under rp.*
        cycle = await api(nc, "STREAM.CREATE.RPC", {
            "name": "RPC", "subjects": ["c.>"], "republish": {"src": ">", "dest": "c.x"}})
        assert cycle["error"]["description"].endswith(
            "republish destination forms a cycle")
        bare = await api(nc, "STREAM.CREATE.RPB", {
            "name": "RPB", "subjects": ["b.>"], "republish": {"dest": "elsewhere"}})
        assert bare["error"]["description"].endswith(  # (a '>' source needs a '>' dest)
            "republish with transform from '>' to 'elsewhere' not valid")
    finally:
        await api(nc, "STREAM.DELETE.RP")
        await api(nc, "STREAM.DELETE.RPH")


async def test_a_subject_transform_stores_the_mapped_subject(nc: Client) -> None:
    await api(nc, "STREAM.CREATE.TR", {
        "name": "TR", "subjects": ["tr.>"], "storage": "memory",
        "subject_transform": {"src": "tr.*.*", "dest": "mapped.$2.$1"}})
    try:
        ack = json.loads((await nc.request("tr.a.b", b"x", timeout=5)).data)
        plain = json.loads((await nc.request("tr.c", b"y", timeout=5)).data)
        assert (ack["seq"], plain["seq"]) == (1, 2)
        got = await api(nc, "STREAM.MSG.GET.TR", {"seq": 1})
        assert got["message"]["subject"] == "mapped.b.a"
        unmapped = await api(nc, "STREAM.MSG.GET.TR", {"seq": 2})
        assert unmapped["message"]["subject"] == "tr.c"
        last = await api(nc, "STREAM.MSG.GET.TR", {"last_by_subj": "mapped.>"})
        assert last["message"]["seq"] == 1
        newest = await api(nc, "STREAM.MSG.GET.TR", {"last_by_subj": ">"})
        assert newest["message"]["seq"] == 2
    finally:
        await api(nc, "STREAM.DELETE.TR")
