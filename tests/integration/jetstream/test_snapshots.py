"""Stream snapshots and restores (`$JS.API.STREAM.SNAPSHOT.<stream>`,
`$JS.API.STREAM.RESTORE.<stream>`) driven with raw requests, as `nats stream backup` and
`nats stream restore` drive them (nats-py has no helper for them), on tidings and on the
reference nats-server: the answers, the chunks and their flow control, the errors, a
round trip that gives the same stream back, and a snapshot of one server restored on the
other (both write the reference's format)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from tests.harness import Server, start_configured, start_reference, start_tidings
from tests.integration.jetstream.conftest import KINDS

TIMES = ("created", "ts", "first_ts", "last_ts", "last_active", "time")


async def api(nc: Client, subject: str, body: Any = None, raw: bytes | None = None
              ) -> dict[str, Any]:
    data = raw if raw is not None else json.dumps(body if body is not None else {}).encode()
    msg = await nc.request(f"$JS.API.{subject}", data, timeout=10)
    return json.loads(msg.data)  # type: ignore[no-any-return]


class Received:
    """What a snapshot's deliver subject got: the chunks (their reply subjects, acked unless
    told not to), and the empty message that ends it."""

    def __init__(self, nc: Client, ack: bool = True) -> None:
        self.nc, self.ack = nc, ack
        self.chunks: list[tuple[str, bytes]] = []
        self.end: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        self.unacked: list[str] = []
        self.more = asyncio.Event()  # (set at each chunk)

    async def until(self, count: int) -> None:
        """Until `count` chunks came."""
        while len(self.chunks) < count:
            self.more.clear()
            await asyncio.wait_for(self.more.wait(), 30)

    async def take(self, msg: Msg) -> None:
        if not msg.data:
            if not self.end.done():
                self.end.set_result(msg)
            return
        self.chunks.append((msg.reply, msg.data))
        self.more.set()
        if msg.reply and self.ack:
            await self.nc.publish(msg.reply, b"")
        elif msg.reply:
            self.unacked.append(msg.reply)

    @property
    def data(self) -> bytes:
        return b"".join(data for _, data in self.chunks)


async def snapshot(nc: Client, stream: str, ack: bool = True, **opts: Any
                   ) -> tuple[dict[str, Any], Received]:
    """The answer to a snapshot request and (once it ended) what was delivered."""
    inbox = nc.new_inbox()
    received = Received(nc, ack)
    sub = await nc.subscribe(inbox, cb=received.take)
    answer = await api(nc, f"STREAM.SNAPSHOT.{stream}", {"deliver_subject": inbox, **opts})
    if "error" not in answer and ack:
        await asyncio.wait_for(received.end, 30)
        await sub.unsubscribe()
    return answer, received


async def restore(nc: Client, stream: str, config: dict[str, Any], state: dict[str, Any],
                  data: bytes, chunk: int = 64 * 1024) -> dict[str, Any]:
    """A restore as `nats stream restore` sends it: each chunk a request, then an empty one;
    the first answer that is not empty (or the last one)."""
    answer = await api(nc, f"STREAM.RESTORE.{stream}", {"config": config, "state": state})
    if "error" in answer:
        return answer
    assert re.fullmatch(rf"\$JS\.SNAPSHOT\.RESTORE\.{stream}\.\w+", answer["deliver_subject"])
    for at in range(0, len(data), chunk):
        reply = await nc.request(answer["deliver_subject"], data[at:at + chunk], timeout=10)
        if reply.data:
            return json.loads(reply.data)  # type: ignore[no-any-return]
    final = await nc.request(answer["deliver_subject"], b"", timeout=30)
    return json.loads(final.data)  # type: ignore[no-any-return]


def timeless(value: Any) -> Any:
    """An answer without what changes from one run to the next (times, server ids)."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items()
                if k not in TIMES and k not in ("cluster", "deliver_subject")}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


def without_server_keys(config: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in config.get("metadata", {}).items() if not k.startswith("_nats.")}
    return {**config, "metadata": meta}


async def contents(nc: Client, stream: str) -> list[Any]:
    """Every sequence of a stream: its message (subject, headers, data, time) or its
    error (a deleted one)."""
    state = (await api(nc, f"STREAM.INFO.{stream}"))["state"]
    out = []
    for seq in range(1, state["last_seq"] + 1):
        got = await api(nc, f"STREAM.MSG.GET.{stream}", {"seq": seq})
        out.append(got.get("message") or got["error"]["err_code"])
    return out


async def fill(nc: Client, stream: str, storage: str) -> None:
    """A stream with headers, payloads, deleted messages in the middle and at the end, and
    a first sequence past 1; a durable consumer with some acked, one pending."""
    created = await api(nc, f"STREAM.CREATE.{stream}", {
        "name": stream, "subjects": [f"{stream}.>"], "storage": storage, "first_seq": 3})
    assert "error" not in created, created
    js = nc.jetstream()
    for i in range(12):
        await js.publish(f"{stream}.{i % 3}", bytes([i]) * i,
                         headers={"N": str(i)} if i % 2 else None)
    for seq in (6, 7, 14):  # (14: the last)
        assert (await api(nc, f"STREAM.MSG.DELETE.{stream}", {"seq": seq}))["success"]
    await api(nc, f"CONSUMER.CREATE.{stream}.D", {"stream_name": stream, "config": {
        "durable_name": "D", "ack_policy": "explicit", "filter_subject": f"{stream}.1"}})
    sub = await js.pull_subscribe_bind("D", stream)
    for msg in await sub.fetch(3, timeout=5):
        if msg.metadata.sequence.stream != 8:
            await msg.ack_sync()
    await sub.unsubscribe()


@pytest.fixture
async def nc(server: Server) -> AsyncIterator[Client]:
    client = await nats.connect(server.url)
    yield client
    await client.close()


@pytest.fixture(scope="module", params=KINDS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    store = tmp_path_factory.mktemp("snap")
    start = start_tidings if request.param == "tidings" else start_reference
    srv = start(extra_args=["-js", "-sd", str(store)])
    yield srv
    srv.stop()


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_a_restored_snapshot_is_the_same_stream(nc: Client, storage: str) -> None:
    name = f"RT{storage.upper()}"
    await fill(nc, name, storage)
    before = await contents(nc, name)
    info = await api(nc, f"STREAM.INFO.{name}")
    consumer = await api(nc, f"CONSUMER.INFO.{name}.D")
    answer, received = await snapshot(nc, name)
    assert answer["type"] == "io.nats.jetstream.api.v1.stream_snapshot_response"
    assert timeless(answer["state"]) == timeless(info["state"])
    assert answer["config"]["metadata"] == {"_nats.req.level": "0"}  # (as the stream keeps it)
    assert received.data.startswith(b"\xff\x06\x00\x00S2sTwO")  # an s2 stream
    assert (await api(nc, f"STREAM.DELETE.{name}"))["success"]

    done = await restore(nc, name, answer["config"], answer["state"], received.data)
    assert done["type"] == "io.nats.jetstream.api.v1.stream_create_response", done
    assert timeless(done["state"]) == timeless(info["state"])
    assert done["state"]["first_ts"] == info["state"]["first_ts"]
    assert timeless(done["config"]) == timeless(info["config"])
    assert await contents(nc, name) == before
    again = await api(nc, f"CONSUMER.INFO.{name}.D")
    for field in ("delivered", "ack_floor", "num_ack_pending", "num_pending", "config"):
        assert timeless(again[field]) == timeless(consumer[field]), field
    # The stream goes on after its last sequence, and the consumer where it was.
    js = nc.jetstream()
    ack = await js.publish(f"{name}.1", b"next")
    assert ack.seq == info["state"]["last_seq"] + 1
    sub = await js.pull_subscribe_bind("D", name)
    got = [m.metadata.sequence.stream for m in await sub.fetch(1, timeout=5)]
    assert got == [ack.seq]  # (8, pending, comes back after its ack wait)
    await sub.unsubscribe()


async def test_the_snapshot_answers_and_refusals(nc: Client) -> None:
    await api(nc, "STREAM.CREATE.ANS", {"name": "ANS", "subjects": ["ans"]})
    refusals = {
        "missing": await api(nc, "STREAM.SNAPSHOT.NOPE", {"deliver_subject": "x"}),
        "empty": await api(nc, "STREAM.SNAPSHOT.ANS", raw=b""),
        "empty object": await api(nc, "STREAM.SNAPSHOT.ANS", {}),
        "wildcard": await api(nc, "STREAM.SNAPSHOT.ANS", {"deliver_subject": "a.*"}),
        "no subject": await api(nc, "STREAM.SNAPSHOT.ANS", {"jsck": True}),
        "a string": await api(nc, "STREAM.SNAPSHOT.ANS", {"deliver_subject": 5}),
    }
    codes = {k: (v["type"], v["error"]["err_code"]) for k, v in refusals.items()}
    kind = "io.nats.jetstream.api.v1.stream_snapshot_response"
    assert codes == {"missing": (kind, 10059), "empty": (kind, 10003),
                     "empty object": (kind, 10003), "wildcard": (kind, 10015),
                     "no subject": (kind, 10015), "a string": (kind, 10025)}
    answer, received = await snapshot(nc, "ANS", no_consumers=True)
    assert sorted(answer) == ["config", "state", "type"]
    # A snapshot shorter than a chunk: one chunk without a reply, then an empty message
    # without headers (a status 204 comes only after a whole chunk).
    assert [reply for reply, _ in received.chunks] == [""]
    assert received.end.result().headers is None


async def test_the_restore_refusals(nc: Client) -> None:
    await api(nc, "STREAM.CREATE.RR", {"name": "RR", "subjects": ["rr"]})
    config = {"name": "RR", "subjects": ["rr"]}
    refusals = {
        "exists": await api(nc, "STREAM.RESTORE.RR", {"config": config}),
        "empty": await api(nc, "STREAM.RESTORE.RR", raw=b""),
        "mismatch": await api(nc, "STREAM.RESTORE.XX", {"config": config}),
        "bad config": await api(nc, "STREAM.RESTORE.R2", {"config": {"retention": "x"}}),
    }
    kind = "io.nats.jetstream.api.v1.stream_restore_response"
    for answer in refusals.values():
        assert answer["type"] == kind and answer["deliver_subject"] == ""
    assert {k: v["error"]["err_code"] for k, v in refusals.items()} == {
        "exists": 10130, "empty": 10003, "mismatch": 10056, "bad config": 10025}


async def test_a_bad_or_cut_snapshot_is_refused(nc: Client) -> None:
    await fill(nc, "CUT", "file")
    answer, received = await snapshot(nc, "CUT")
    await api(nc, "STREAM.DELETE.CUT")
    config, state = answer["config"], answer["state"]
    failed = {
        "garbage": await restore(nc, "CUT", config, state, b"garbage!" * 10),
        "cut": await restore(nc, "CUT", config, state, received.data[:len(received.data) // 2]),
        "nothing": await restore(nc, "CUT", config, state, b""),
    }
    kind = "io.nats.jetstream.api.v1.stream_create_response"
    assert {k: (v["type"], v["error"]) for k, v in failed.items()} == {
        "garbage": (kind, {"code": 500, "err_code": 10062,
                           "description": "restore failed: s2: corrupt input"}),
        "cut": (kind, {"code": 500, "err_code": 10062,
                       "description": "restore failed: s2: corrupt input"}),
        "nothing": (kind, {"code": 500, "err_code": 10062,
                           "description": "restore failed: EOF"}),
    }
    assert (await api(nc, "STREAM.INFO.CUT"))["error"]["err_code"] == 10059
    # Nothing of it is left: the whole snapshot restores after.
    done = await restore(nc, "CUT", config, state, received.data)
    assert done["state"]["messages"] == state["messages"], done


async def test_a_large_snapshot_goes_in_chunks_within_its_window(nc: Client) -> None:
    await api(nc, "STREAM.CREATE.BIG", {"name": "BIG", "subjects": ["big"]})
    js = nc.jetstream()
    payloads = [os.urandom(2000) for _ in range(400)]  # (that s2 cannot compress)
    await asyncio.gather(*(js.publish("big", payload) for payload in payloads))
    chunk = 16 * 1024
    answer, received = await snapshot(nc, "BIG", ack=False, chunk_size=chunk,
                                      window_size=4 * chunk)
    assert "error" not in answer
    await received.until(4)
    await nc.flush()  # (the server read and answered a PING since: no fifth went)
    assert len(received.chunks) == 4 and len(received.unacked) == 4
    for reply in received.unacked:
        await nc.publish(reply, b"")
    received.ack = True
    received.unacked.clear()
    end = await asyncio.wait_for(received.end, 30)
    assert end.headers == {"Status": "204"} or end.header == {"Status": "204"}
    *whole, (last_reply, last) = received.chunks
    for n, (reply, data) in enumerate(whole, 1):
        assert len(data) == chunk
        assert re.fullmatch(rf"\$JS\.SNAPSHOT\.ACK\.BIG\.\w+\.{chunk}\.{n}", reply), reply
    assert last_reply == "" and 0 < len(last) <= chunk
    await api(nc, "STREAM.DELETE.BIG")
    done = await restore(nc, "BIG", answer["config"], answer["state"], received.data)
    assert done["state"]["messages"] == 400
    got = await api(nc, "STREAM.MSG.GET.BIG", {"seq": 400})
    assert base64.b64decode(got["message"]["data"]) == payloads[-1]


async def test_no_consumers_leaves_them_out(nc: Client) -> None:
    await fill(nc, "NOC", "file")
    answer, received = await snapshot(nc, "NOC", no_consumers=True)
    assert answer["state"]["consumer_count"] == 1  # (the stream's)
    await api(nc, "STREAM.DELETE.NOC")
    done = await restore(nc, "NOC", answer["config"], answer["state"], received.data)
    assert done["state"]["consumer_count"] == 0
    assert (await api(nc, "CONSUMER.NAMES.NOC"))["consumers"] in ([], None)


# -- between the servers ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    servers = {"tidings": start_tidings(extra_args=["-js", "-sd", str(
        tmp_path_factory.mktemp("t"))]), "reference": start_reference(extra_args=[
            "-js", "-sd", str(tmp_path_factory.mktemp("r"))])}
    yield servers
    for srv in servers.values():
        srv.stop()


@pytest.mark.parametrize("origin", KINDS)
async def test_a_snapshot_of_one_server_restores_on_the_other(
        both: dict[str, Server], origin: str) -> None:
    target = "reference" if origin == "tidings" else "tidings"
    source = await nats.connect(both[origin].url)
    dest = await nats.connect(both[target].url)
    try:
        name = f"X{origin.upper()}"
        await fill(source, name, "file")
        js = source.jetstream()
        for i in range(200):  # (compressible: the reference's s2 blocks copy and repeat)
            await js.publish(f"{name}.r", b"abcabcab" * (i + 1) + bytes([i]))
        before = await contents(source, name)
        consumer = await api(source, f"CONSUMER.INFO.{name}.D")
        answer, received = await snapshot(source, name)
        done = await restore(dest, name, answer["config"], answer["state"], received.data)
        assert "error" not in done, done
        assert timeless(done["state"]) == timeless(answer["state"])
        assert await contents(dest, name) == before
        again = await api(dest, f"CONSUMER.INFO.{name}.D")
        for field in ("delivered", "ack_floor", "num_ack_pending", "num_pending"):
            assert timeless(again[field]) == timeless(consumer[field]), field
        assert without_server_keys(again["config"]) == without_server_keys(consumer["config"])
    finally:
        await source.close()
        await dest.close()


# -- limits --------------------------------------------------------------------------------------

LIMITED = """
jetstream: {{ store_dir: "{store}" }}
accounts: {{
  A {{ users: [{{ user: "a", password: "a" }}], jetstream: {{ max_file: 20000 }} }}
  B {{ users: [{{ user: "b", password: "b" }}], jetstream: enabled }}
}}
"""


@pytest.mark.parametrize("kind", KINDS)
async def test_a_restore_beyond_the_accounts_limits_is_refused(
        kind: str, tmp_path: Path) -> None:
    srv = start_configured(kind, LIMITED.format(store=tmp_path), streaming=False)
    try:
        b = await nats.connect(srv.url, user="b", password="b")
        a = await nats.connect(srv.url, user="a", password="a")
        await api(b, "STREAM.CREATE.L", {"name": "L", "subjects": ["l"]})
        for _ in range(40):
            await b.jetstream().publish("l", b"x" * 1000)
        answer, received = await snapshot(b, "L")
        done = await restore(a, "L", answer["config"], answer["state"], received.data)
        assert done == {"type": "io.nats.jetstream.api.v1.stream_create_response",
                        "error": {"code": 500, "err_code": 10047,
                                  "description": "insufficient storage resources available"}}
        assert (await api(a, "STREAM.INFO.L"))["error"]["err_code"] == 10059
        await a.close()
        await b.close()
    finally:
        srv.stop()
