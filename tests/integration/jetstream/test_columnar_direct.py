"""Columnar direct get batches (`tidings.jetstream.bulk`, the request header
`Tidings-Columnar: 1`): tidings answers a batch with a few messages holding the same
messages, headers and end-of-batch status a plain batch gives; the reference ignores the
header and answers as it answers any batch, so a reader asking for columns reads both. The
layout is decoded here from its description, not with tidings' reader."""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from tests.harness import Server

COLUMNAR = {"Tidings-Columnar": "1"}
LAYOUT = struct.Struct("<4sIIIII")
HDR = b"NATS/1.0\r\nTrace: a\r\nTrace: b\r\n\r\n"
ADDED = ("Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp",
         "Nats-Num-Pending", "Nats-Last-Sequence")


async def batch(nc: Client, stream: str, body: dict[str, Any],
                headers: dict[str, str] | None = None) -> list[tuple[bytes, bytes]]:
    """The raw replies (header block, payload) to one direct get, through its status."""
    inbox = nc.new_inbox()
    got: list[tuple[bytes, bytes]] = []
    ended = asyncio.Event()

    async def on_msg(msg: Any) -> None:
        block = b""
        if msg.headers is not None or msg.header is not None:
            block = _block(msg)
        got.append((block, msg.data))
        if block.startswith(b"NATS/1.0 "):
            ended.set()

    sub = await nc.subscribe(inbox, cb=on_msg)
    await nc.publish(f"$JS.API.DIRECT.GET.{stream}", json.dumps(body).encode(), reply=inbox,
                     headers=headers)
    await asyncio.wait_for(ended.wait(), 10)
    await sub.unsubscribe()
    return got


def _block(msg: Any) -> bytes:
    """The message's header block as it came (status line first)."""
    head = "NATS/1.0"
    hdrs = dict(msg.headers or {})
    status = hdrs.pop("Status", None)
    if status:
        head += f" {status} {hdrs.pop('Description', '')}".rstrip()
    lines = [head] + [f"{k}: {v}" for k, v in hdrs.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def decode(reply: bytes) -> list[tuple[int, int, str, bytes, bytes]]:
    magic, count, flags, n_subjects, n_headers, n_data = LAYOUT.unpack_from(reply)
    assert (magic, flags) == (b"TJB1", 0)
    at = LAYOUT.size
    seqs = struct.unpack_from(f"<{count}q", reply, at)
    stamps = struct.unpack_from(f"<{count}q", reply, at + 8 * count)
    at += 16 * count
    offsets = [struct.unpack_from(f"<{count + 1}i", reply, at + k * 4 * (count + 1))
               for k in range(3)]
    at += 12 * (count + 1)
    areas = []
    for size in (n_subjects, n_headers, n_data):
        areas.append(reply[at:at + size])
        at += size
    assert at == len(reply)
    return [(seqs[i], stamps[i], areas[0][offsets[0][i]:offsets[0][i + 1]].decode(),
             areas[1][offsets[1][i]:offsets[1][i + 1]], areas[2][offsets[2][i]:offsets[2][i + 1]])
            for i in range(count)]


def plain_rows(replies: list[tuple[bytes, bytes]], nc_headers: list[dict[str, str]]
               ) -> list[tuple[int, str, dict[str, str], bytes]]:
    return [(int(h["Nats-Sequence"]), h["Nats-Subject"],
             {k: v for k, v in h.items() if k not in ADDED}, data)
            for h, (_, data) in zip(nc_headers, replies, strict=True)]


@pytest.fixture(scope="module")
def tidings(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.harness import start_tidings

    srv = start_tidings(extra_args=["-js", "-sd", str(tmp_path_factory.mktemp("js"))])
    yield srv
    srv.stop()


async def _fill(nc: Client, name: str, storage: str, n: int, size: int = 40) -> None:
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[f"{name}.>"], storage=storage, allow_direct=True)
    for i in range(n):
        await nc.publish(f"{name}.{i % 3}", b"%06d" % i + b"." * size,
                         headers={"Trace": "a"} if i % 4 == 0 else None)
    await nc.flush()
    for seq in (5, 6, 50):
        await js.delete_msg(name, seq)


def _headers_of(block: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in block.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            out.setdefault(name.decode(), value.strip().decode())
    return out


@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_a_columnar_batch_holds_what_a_plain_batch_does(tidings: Server,
                                                              storage: str) -> None:
    nc = await nats.connect(tidings.url)
    name = f"COL{storage.upper()}"
    try:
        await _fill(nc, name, storage, 300)
        for body in ({"seq": 1, "batch": 1_000}, {"seq": 40, "batch": 25},
                     {"seq": 2, "batch": 500, "next_by_subj": f"{name}.1"},
                     {"seq": 1, "batch": 1_000, "max_bytes": 2_000}):
            plain = await batch(nc, name, body)
            columnar = await batch(nc, name, body, COLUMNAR)
            assert columnar[-1][0] == plain[-1][0]  # (the same 204 EOB, pending, last seq)
            expected = [(int(h["Nats-Sequence"]), h["Nats-Subject"],
                         {k: v for k, v in h.items() if k not in ADDED}, data)
                        for h, data in ((_headers_of(b), d) for b, d in plain[:-1])]
            rows = [row for block, data in columnar[:-1] for row in decode(data)]
            assert all(block == b"" for block, _ in columnar[:-1])
            assert [(seq, subject, _headers_of(h), data) for seq, _, subject, h, data in rows] \
                == expected
    finally:
        await nc.close()


async def test_a_large_batch_comes_in_several_replies_and_nothing_found_is_a_404(
        tidings: Server) -> None:
    nc = await nats.connect(tidings.url)
    try:
        await _fill(nc, "COLBIG", "file", 3_000, size=200)
        replies = await batch(nc, "COLBIG", {"seq": 1, "batch": 10_000}, COLUMNAR)
        rows = [row for _, data in replies[:-1] for row in decode(data)]
        assert len(replies) > 2  # (about 600 KB: two replies of 384 KiB at most, then EOB)
        assert [r[0] for r in rows] == [n for n in range(1, 3_001) if n not in (5, 6, 50)]
        assert all(len(data) <= 384 * 1024 for _, data in replies[:-1])
        stamps = [r[1] for r in rows]
        assert stamps == sorted(stamps) and stamps[0] > 1_600_000_000 * 10**9
        gone = await batch(nc, "COLBIG", {"seq": 3_001, "batch": 10}, COLUMNAR)
        assert gone == [(b"NATS/1.0 404 Message Not Found\r\n\r\n", b"")]
        last = await nc.request("$JS.API.DIRECT.GET.COLBIG", b'{"last_by_subj": "COLBIG.1"}',
                                headers=COLUMNAR)  # (not a batch: answered as always)
        assert last.headers is not None and last.headers["Nats-Sequence"] == "2999"
    finally:
        await nc.close()


async def test_the_reference_answers_a_columnar_request_as_a_plain_one(
        servers: list[Server]) -> None:
    reference = servers[1]
    nc = await nats.connect(reference.url)
    try:
        await _fill(nc, "COLREF", "file", 50)
        plain = await batch(nc, "COLREF", {"seq": 1, "batch": 100})
        asked = await batch(nc, "COLREF", {"seq": 1, "batch": 100}, COLUMNAR)
        assert asked == plain and len(plain) == 48
    finally:
        await nc.close()
