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
import random
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from tests.harness import (
    Server,
    TidingsServer,
    start_configured,
    start_reference,
    start_tidings,
)
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
    for body in (b"{x", b'{"deliver_subject": "a" ', b'{"deliver_subject" 1}'):
        refusals[body.decode()] = await api(nc, "STREAM.SNAPSHOT.ANS", raw=body)
    assert [refusals[k]["error"]["description"] for k in list(refusals)[-3:]] == [
        "invalid JSON: invalid character 'x' looking for beginning of object key string"
        " at offset 2", "invalid JSON: unexpected EOF",
        "invalid JSON: invalid character '1' after object key at offset 20"]
    codes = {k: (v["type"], v["error"]["err_code"]) for k, v in refusals.items()
             if not k.startswith("{")}
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


# -- snapshots made by hand ------------------------------------------------------------------------

def s2_stream(data: bytes) -> bytes:
    from tidings.jetstream import archive

    return archive.STREAM_IDENTIFIER + b"".join(
        archive.frame(data[at:at + archive.FRAME]) for at in range(0, len(data), archive.FRAME))


def crafted(*entries: bytes, state: dict[str, Any] | None = None, end: bool = True) -> bytes:
    from tidings.jetstream import archive

    head = archive.MAGIC
    if state is not None:
        head += archive.document("state.json", json.dumps(state).encode(), 1)
    return s2_stream(head + b"".join(entries) + (archive.END if end else b""))


def message(seq: int, subject: bytes = b"h.x", payload: bytes = b"hi", ts: int = 10**18) -> bytes:
    from tidings.jetstream import archive

    return archive.entry_head(subject, ts, seq, 0, len(payload)) + payload


STATE = {"messages": 2, "bytes": 80, "first_seq": 1, "last_seq": 2, "consumer_count": 0}
CRAFTED = {
    "no state first": (crafted(message(1)), "expected state.json first"),
    "out of order": (crafted(message(2), message(1), state=STATE),
                     "message sequence 1 out of order"),
    "a consumer missing": (crafted(message(1), state={**STATE, "consumer_count": 1}),
                           'expected consumer, found "h.x"'),
    "a zero sequence": (crafted(message(0), state=STATE), "expected message sequence"),
    "too large": (crafted(message(1, payload=b"x" * (1024 * 1024 + 1)), state=STATE),
                  "message sequence 1 exceeds maximum payload size"),
    "no end": (crafted(message(1), state=STATE, end=False), "EOF"),
    "cut in an entry": (crafted(state=STATE, end=False) + s2_stream(b"\x03")[10:],
                        "archive: invalid archive stream"),
    "not an archive": (s2_stream(b"NATSARC2" + b"\0" * 600), None),
    "bad checksum": (s2_stream(b"NATSARC1")[:-1] + b"!", "s2: corrupt input, crc mismatch"),
    "unknown chunk": (b"\xff\x06\x00\x00S2sTwO\x05\x01\x00\x00x", "s2: unsupported input"),
}


@pytest.mark.parametrize("case", list(CRAFTED))
async def test_a_crafted_snapshot_is_refused_with_the_references_words(
        server: Server, nc: Client, case: str) -> None:
    """The same words on both servers; what the reference's tar reader says of what is no
    archive tidings does not say. The reference leaves the stream it began (as far as it
    got) once the snapshot's state was read; tidings leaves nothing."""
    data, words = CRAFTED[case]
    name = "CR" + re.sub(r"\W", "", case.title())
    config = {"name": name, "subjects": [f"{name}.>"]}
    done = await restore(nc, name, config, STATE, data, chunk=1000)
    assert done["type"] == "io.nats.jetstream.api.v1.stream_create_response"
    assert done["error"]["err_code"] == 10062, done
    if words is not None:  # (a tar of the reference's old format: its tar reader's words)
        assert done["error"]["description"] == f"restore failed: {words}"
    if isinstance(server, TidingsServer):
        assert (await api(nc, f"STREAM.INFO.{name}"))["error"]["err_code"] == 10059


def garbled(rng: random.Random, valid: bytes) -> bytes:
    """An archive of a valid snapshot with bytes changed, cut or added (framed anew: the
    checksums hold, what they hold does not)."""
    from tidings.jetstream import archive

    data = bytearray(valid)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data))
        choice = rng.random()
        if choice < 0.5:
            data[at] = rng.randrange(256)
        elif choice < 0.7:
            del data[at:at + rng.randint(1, 40)]
        elif choice < 0.9:
            data[at:at] = rng.randbytes(rng.randint(1, 12))
        else:
            data[at:at] = archive.entry_head(b"x", rng.randint(-5, 5), rng.choice(
                [0, 1, 2**62, 2**64 - 1]), rng.choice([0, 2**63 - 1]), rng.randint(0, 3))
    return s2_stream(bytes(data))


async def test_a_garbled_snapshot_is_answered_never_a_traceback(tmp_path: Path) -> None:
    """tidings only: what it does with any archive (the reference's answers to the same
    would differ where its store differs)."""
    from tidings.jetstream import archive

    srv = start_tidings(extra_args=["-js", "-sd", str(tmp_path)])
    try:
        nc = await nats.connect(srv.url)
        await fill(nc, "G", "file")
        answer, received = await snapshot(nc, "G")
        await api(nc, "STREAM.DELETE.G")
        reader = archive.S2Reader()
        valid = b"".join(reader.feed(received.data))
        rng = random.Random(25)
        outcomes = set()
        for _ in range(150):
            done = await restore(nc, "G", answer["config"], answer["state"],
                                 garbled(rng, valid), chunk=rng.choice([7, 100, 4096]))
            assert done["type"] == "io.nats.jetstream.api.v1.stream_create_response", done
            outcomes.add(done.get("error", {}).get("description", "restored"))
            if "error" not in done:
                await api(nc, "STREAM.DELETE.G")
        assert len(outcomes) > 5, outcomes  # (many ways to fail were tried)
        await nc.close()
        log = srv.log()
    finally:
        srv.stop()
    assert "Traceback" not in log, log


async def test_a_large_stream_is_never_held_whole_in_memory(tmp_path: Path) -> None:
    """tidings only: a snapshot of a 24 MB file stream (the client writes its chunks to a
    file as they come) and its restore (sent from that file) each raise the server's peak
    resident memory by a small part of that."""
    srv = start_tidings(extra_args=["-js", "-sd", str(tmp_path / "js")])
    nc = await nats.connect(srv.url)
    try:
        await api(nc, "STREAM.CREATE.HUGE", {"name": "HUGE", "subjects": ["huge"]})
        js = nc.jetstream()
        for _ in range(60):
            await asyncio.gather(*(js.publish("huge", os.urandom(4000)) for _ in range(100)))
        path = tmp_path / "snapshot"
        before = peak_memory(srv.pid)
        answer, size = await snapshot_to_file(nc, "HUGE", path)
        after_snapshot = peak_memory(srv.pid)
        assert size > 24_000_000 and answer["state"]["messages"] == 6000
        await api(nc, "STREAM.DELETE.HUGE")
        done = await restore_from_file(nc, "HUGE", answer, path)
        after_restore = peak_memory(srv.pid)
        assert done["state"]["messages"] == 6000, done
        assert after_snapshot - before < 8_000_000, (before, after_snapshot)
        assert after_restore - after_snapshot < 8_000_000, (after_snapshot, after_restore)
    finally:
        await nc.close()
        srv.stop()


def peak_memory(pid: int) -> int:
    """A process's peak resident memory (bytes)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


async def snapshot_to_file(nc: Client, stream: str, path: Path) -> tuple[dict[str, Any], int]:
    done = asyncio.get_running_loop().create_future()
    with path.open("wb") as out:
        async def take(msg: Msg) -> None:
            if not msg.data:
                done.set_result(None)
                return
            out.write(msg.data)
            if msg.reply:
                await nc.publish(msg.reply, b"")

        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox, cb=take)
        answer = await api(nc, f"STREAM.SNAPSHOT.{stream}", {
            "deliver_subject": inbox, "window_size": 1024 * 1024})
        await asyncio.wait_for(done, 60)
        await sub.unsubscribe()
    return answer, path.stat().st_size


async def restore_from_file(nc: Client, stream: str, answer: dict[str, Any],
                            path: Path) -> dict[str, Any]:
    started = await api(nc, f"STREAM.RESTORE.{stream}", {"config": answer["config"],
                                                         "state": answer["state"]})
    with path.open("rb") as source:
        while chunk := source.read(64 * 1024):
            await nc.request(started["deliver_subject"], chunk, timeout=10)
    final = await nc.request(started["deliver_subject"], b"", timeout=60)
    return json.loads(final.data)  # type: ignore[no-any-return]


async def test_a_snapshot_nobody_answers_ends_and_one_of_a_deleted_stream_fails(
        server: Server, nc: Client) -> None:
    """A chunk unanswered for 5 seconds ends the snapshot with `408 No Flow Response`; a
    stream deleted while its snapshot goes ends it on tidings with `500 stream closed`
    (the reference sends nothing more: its stream's queue went with the stream). A restore
    that heard nothing for 5 seconds (it began before the snapshot's chunk went) is given
    up: nobody takes its chunks any more."""
    stalled = await api(nc, "STREAM.RESTORE.STALL", {"config": {"name": "STALL"}})
    await api(nc, "STREAM.CREATE.SLOW", {"name": "SLOW", "subjects": ["slow"]})
    await api(nc, "STREAM.CREATE.GONE", {"name": "GONE", "subjects": ["gone"]})
    js = nc.jetstream()
    for _ in range(40):
        await js.publish("slow", os.urandom(1000))
        await js.publish("gone", os.urandom(1000))
    opts = {"chunk_size": 1024, "window_size": 1024}
    _, slow = await snapshot(nc, "SLOW", ack=False, **opts)
    _, gone = await snapshot(nc, "GONE", ack=False, **opts)
    await gone.until(1)
    await api(nc, "STREAM.DELETE.GONE")
    await nc.publish(gone.unacked[0], b"")
    if isinstance(server, TidingsServer):
        failed = await asyncio.wait_for(gone.end, 30)
        assert failed.headers == {"Status": "500", "Description": "stream closed"}
    ended = await asyncio.wait_for(slow.end, 30)
    assert len(slow.chunks) == 1
    assert ended.headers == {"Status": "408", "Description": "No Flow Response"}
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request(stalled["deliver_subject"], b"", timeout=5)


async def test_a_restore_chunk_without_a_reply_subject_ends_the_restore(nc: Client) -> None:
    config = {"name": "NOREPLY", "subjects": ["noreply"]}
    started = await api(nc, "STREAM.RESTORE.NOREPLY", {"config": config})
    await nc.publish(started["deliver_subject"], crafted(state=STATE))
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request(started["deliver_subject"], b"", timeout=5)
    assert (await api(nc, "STREAM.INFO.NOREPLY"))["error"]["err_code"] == 10059


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_a_snapshot_with_wide_gaps_restores_its_sequences(
        server: Server, nc: Client, storage: str) -> None:
    """A snapshot made by hand: its first message at 5, the next 200000 later, its last
    sequence beyond its last message (as a stream whose messages were removed). tidings
    keeps the last time the state says; the reference takes its last message's."""
    ts = 1_700_000_000 * 10**9
    state = {"messages": 2, "bytes": 0, "first_seq": 5, "last_seq": 300_000,
             "last_ts": "2023-11-14T22:13:21Z", "consumer_count": 0}
    data = crafted(message(5, ts=ts), message(200_005, payload=b"far", ts=ts + 1),
                   state=state)
    name = f"GAP{storage.upper()}"
    config = {"name": name, "subjects": [f"{name}.>"], "storage": storage}
    done = await restore(nc, name, config, state, data)
    assert timeless(done["state"]) == {
        "messages": 2, "bytes": 2 * (30 + 3 + 2) + 1 if storage == "file" else 2 * 21 + 1,
        "first_seq": 5, "last_seq": 300_000, "num_subjects": 1, "num_deleted": 299_994,
        "consumer_count": 0}, done
    if isinstance(server, TidingsServer):
        assert done["state"]["last_ts"] == "2023-11-14T22:13:21Z"
    far = await api(nc, f"STREAM.MSG.GET.{name}", {"seq": 200_005})
    assert far["message"]["data"] == base64.b64encode(b"far").decode()
    assert (await api(nc, f"STREAM.MSG.GET.{name}", {"seq": 6}))["error"]["err_code"] == 10037
    ack = await nc.jetstream().publish(f"{name}.next", b"")
    assert ack.seq == 300_001
