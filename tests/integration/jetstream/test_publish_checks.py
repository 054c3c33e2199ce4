"""The checks a JetStream publish goes through, in the reference's order: sealed, the
message size, Nats-Expected-Stream, Nats-TTL (allowed at all?), Nats-Expected-Last-Subject-
Sequence, Nats-Expected-Last-Sequence, the Nats-Msg-Id duplicate window, Nats-Expected-Last-
Msg-Id (the id of the message stored last), the rollup, the TTL's value. The same publishes (header combinations and
replays of a Msg-Id already stored) go to tidings and to the reference nats-server; their
PubAcks and error answers are compared whole, one by one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.harness import Server, start_reference, start_tidings
from tests.integration.jetstream.conftest import KINDS
from tidings.jetstream.stream import jetstream_fields
from tidings.protocol.headers import header_fields

ID = "Nats-Msg-Id"
STREAM = "Nats-Expected-Stream"
LAST = "Nats-Expected-Last-Sequence"
LAST_SUBJ = "Nats-Expected-Last-Subject-Sequence"
LAST_SUBJ_SUBJ = "Nats-Expected-Last-Subject-Sequence-Subject"
LAST_ID = "Nats-Expected-Last-Msg-Id"
TTL = "Nats-TTL"
ROLLUP = "Nats-Rollup"

# (subject, headers, payload size) in turn, on a stream capturing "<prefix>.>"
Step = tuple[str, dict[str, str], int]

HEADER_ORDER: list[Step] = [
    ("a", {ID: "m1"}, 8),
    ("a", {ID: "m1", LAST: "0"}, 8),  # a replay whose expected last sequence is stale
    ("a", {ID: "m1", LAST: "1"}, 8),
    ("a", {ID: "m1", STREAM: "OTHER"}, 8),
    ("a", {ID: "m1", STREAM: "PCA"}, 8),
    ("a", {ID: "m1", LAST_SUBJ: "0"}, 8),
    ("a", {ID: "m1", LAST_SUBJ: "1"}, 8),
    ("b", {ID: "m1", LAST_SUBJ: "0"}, 8),
    ("a", {ID: "m1", LAST_ID: "nope"}, 8),  # a duplicate before its expected last id
    ("a", {ID: "m2", LAST_ID: "m1"}, 8),
    ("a", {ID: "m2", LAST_ID: "m1"}, 8),
    ("a", {}, 8),  # stored without an id: the last stored message's id is none
    ("a", {LAST_ID: "m2"}, 8),
    ("a", {ID: "m3", LAST: "3"}, 8),
    ("a", {ID: "m3", LAST: "3"}, 8),
    ("a", {ID: "m4", LAST: "abc"}, 8),
    ("a", {ID: "m4", LAST_SUBJ_SUBJ: "pca.b"}, 8),
    ("a", {ID: "m4", LAST_SUBJ: "0", LAST_SUBJ_SUBJ: "pca.b"}, 8),
    ("a", {ID: "m4", LAST_SUBJ: "0", LAST_SUBJ_SUBJ: "pca.b"}, 8),
    ("a", {ID: "m5", TTL: "5s"}, 8),  # TTLs not allowed on this stream
    ("a", {ID: "m4", TTL: "5s"}, 8),  # ... said before the duplicate
    ("a", {ID: "m4", ROLLUP: "bogus"}, 8),  # the rollup is judged after the duplicate
    ("a", {ID: "m6", ROLLUP: "sub"}, 8),
    ("a", {ID: "m6", LAST_ID: "m4"}, 8),
    ("a", {ID: "m7", LAST_ID: "m6"}, 8),
]
SIZE_ORDER: list[Step] = [  # max_msg_size 100: the size is judged right after sealed
    ("a", {ID: "b1"}, 8),
    ("a", {ID: "b1"}, 200),  # a duplicate too large
    ("a", {ID: "b2", LAST: "0"}, 200),
    ("a", {ID: "b2", STREAM: "OTHER"}, 200),
    ("a", {ID: "b2", LAST_ID: "x"}, 200),
    ("a", {ID: "b2", LAST: "1"}, 8),
    ("a", {ID: "b1", LAST: "1"}, 8),
]
TTL_ORDER: list[Step] = [  # allow_msg_ttl
    ("a", {ID: "c1", TTL: "abc"}, 8),
    ("a", {ID: "c1", TTL: "abc", LAST: "5"}, 8),  # the TTL's value is judged late
    ("a", {ID: "c1", TTL: "abc", LAST_ID: "x"}, 8),
    ("a", {ID: "c1", TTL: "10s"}, 8),
    ("a", {ID: "c1", TTL: "abc"}, 8),
    ("a", {ID: "c1", TTL: "10s", LAST: "0"}, 8),
]
FULL_ORDER: list[Step] = [  # max_msgs 1, discard new
    ("a", {ID: "e1"}, 8),
    ("a", {ID: "e1"}, 8),
    ("a", {ID: "e2", LAST: "0"}, 8),
    ("a", {ID: "e2"}, 8),
]
SEALED_ORDER: list[Step] = [  # max_msg_size 100, sealed after the first
    ("a", {ID: "d1"}, 8),
    ("a", {ID: "d1", LAST: "7"}, 8),
    ("a", {ID: "d1"}, 200),
]


async def answers(server: Server, config: dict[str, Any], steps: list[Step],
                  seal: bool = False) -> list[dict[str, Any]]:
    """The JSON answer to each publish of `steps`, on a stream made of `config` (sealed
    after its first message with `seal`)."""
    name = config["name"]
    prefix = name.lower()
    nc = await nats.connect(server.url)
    try:
        made = await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(
            {"subjects": [f"{prefix}.>"], "storage": "file", **config}).encode(), timeout=5)
        assert "error" not in json.loads(made.data), made.data
        got = []
        for i, (subject, headers, size) in enumerate(steps):
            if seal and i == 1:
                await seal_stream(nc, name)
            reply = await nc.request(f"{prefix}.{subject}", b"x" * size,
                                     headers=headers or None, timeout=5)
            got.append(json.loads(reply.data))
        return got
    finally:
        await nc.close()


async def seal_stream(nc: Any, name: str) -> None:
    info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)).data)
    body = json.dumps({**info["config"], "sealed": True}).encode()
    sealed = await nc.request(f"$JS.API.STREAM.UPDATE.{name}", body, timeout=5)
    assert "error" not in json.loads(sealed.data), sealed.data


def side_by_side(steps: list[Step], ours: list[Any], theirs: list[Any]) -> list[str]:
    return [f"{headers} {size} B: tidings {a} / reference {b}"
            for (_, headers, size), a, b in zip(steps, ours, theirs, strict=True) if a != b]


async def compare(servers: list[Server], config: dict[str, Any], steps: list[Step],
                  seal: bool = False) -> None:
    ours, theirs = [await answers(srv, config, steps, seal) for srv in servers]
    assert side_by_side(steps, ours, theirs) == []


async def test_expected_headers_come_before_the_duplicate_window(
        servers: list[Server]) -> None:
    await compare(servers, {"name": "PCA"}, HEADER_ORDER)


async def test_the_message_size_comes_before_the_expected_headers_and_duplicates(
        servers: list[Server]) -> None:
    await compare(servers, {"name": "PCB", "max_msg_size": 100}, SIZE_ORDER)


async def test_a_ttls_value_is_judged_after_the_duplicate_window(
        servers: list[Server]) -> None:
    await compare(servers, {"name": "PCC", "allow_msg_ttl": True}, TTL_ORDER)


async def test_a_full_stream_still_answers_duplicates(servers: list[Server]) -> None:
    await compare(servers, {"name": "PCE", "max_msgs": 1, "discard": "new"}, FULL_ORDER)


async def test_a_sealed_stream_refuses_even_a_duplicate(servers: list[Server]) -> None:
    await compare(servers, {"name": "PCD", "max_msg_size": 100}, SEALED_ORDER, seal=True)


@pytest.mark.parametrize("kind", KINDS)
async def test_the_last_stored_msg_id_outlives_a_restart(kind: str, tmp_path: Path) -> None:
    """Nats-Expected-Last-Msg-Id after a restart is judged against the id of the message
    stored last, read again with the duplicate window."""
    start = start_tidings if kind == "tidings" else start_reference
    server = start(extra_args=["-js", "-sd", str(tmp_path)])
    steps: list[Step] = [("a", {ID: "r1"}, 8), ("a", {ID: "r2"}, 8)]
    try:
        assert [a.get("seq") for a in await answers(server, {"name": "PCR"}, steps)] == [1, 2]
        server.stop()
        server.start()
        nc = await nats.connect(server.url)
        try:
            got = []
            for last in ("r1", "r2"):
                reply = await nc.request("pcr.a", b"x", headers={LAST_ID: last}, timeout=5)
                got.append(json.loads(reply.data))
        finally:
            await nc.close()
        assert got[0]["error"]["description"] == "wrong last msg ID: r2"
        assert got[1] == {"stream": "PCR", "seq": 3}
    finally:
        server.stop()


async def test_an_id_is_taken_again_once_its_window_has_passed(servers: list[Server]) -> None:
    """The duplicate window forgets an id once it is older than the window (not before)."""
    async def run(server: Server) -> list[Any]:
        nc = await nats.connect(server.url)
        try:
            made = await nc.request("$JS.API.STREAM.CREATE.PCW", json.dumps(
                {"name": "PCW", "subjects": ["pcw.>"], "duplicate_window": 500_000_000}).encode(), timeout=5)
            assert "error" not in json.loads(made.data), made.data
            got = []
            for msg_id, wait in (("w1", 0.0), ("w2", 0.0), ("w1", 0.0), ("w1", 1.5),
                                 ("w3", 0.0), ("w3", 0.0), ("w2", 0.0)):
                await asyncio.sleep(wait)  # (past the window: time, not an event)
                reply = await nc.request("pcw.a", b"x", headers={ID: msg_id}, timeout=5)
                got.append(json.loads(reply.data))
            return got
        finally:
            await nc.close()

    ours, theirs = [await run(srv) for srv in servers]
    assert ours == theirs
    assert [a["seq"] for a in ours] == [1, 2, 1, 3, 4, 4, 5]


HEADER_BLOCKS = [
    b"NATS/1.0\r\nNats-Msg-Id: abc\r\n\r\n",
    b"NATS/1.0\r\nnats-msg-id:abc  \r\n\r\n",
    b"NATS/1.0\r\nNATS-MSG-ID: \t a b \r\nX-Other: 1\r\n\r\n",
    b"NATS/1.0\r\nX-Other: nats-msg-id: no\r\nNats-Msg-Id: yes\r\n\r\n",
    b"NATS/1.0\r\nNats-Msg-Id: first\r\nNats-Msg-Id: second\r\n\r\n",
    b"NATS/1.0\r\nNats-Msg-Id: a\r\nNats-Expected-Last-Sequence: 4\r\n\r\n",
    b"NATS/1.0\r\n Nats-Msg-Id : padded\r\n\r\n",
    b"NATS/1.0\r\nNats-Msg-Id: cut short",
    b"NATS/1.0\r\nNats-Msg-Id:\r\n\r\n",
    b"NATS/1.0\r\nNats-Msg-Id: \xff\xfe\r\n\r\n",
    b"NATS/1.0\r\nX-Only: 1\r\n\r\n",
    b"NATS/1.0 408 Timeout\r\n\r\n",
    b"NATS/1.0\r\nNats-Msg-Idx: 1\r\n\r\n",
    b"NATS/1.0\r\nNats-TTL: 5s\r\nnats-msg-id: x\r\n\r\n",
]


@pytest.mark.parametrize("block", HEADER_BLOCKS)
def test_the_fields_a_stream_judges_are_those_of_the_full_header_reading(block: bytes) -> None:
    """jetstream_fields (an id alone read without splitting the block) gives the Nats-*
    fields header_fields gives, whatever the spelling."""
    full = {k: v for k, v in header_fields(block).items() if k.startswith("nats-")}
    assert jetstream_fields(block) == full
