"""`compression: s2` on a file stream, on tidings and the reference: the same state and
messages as without it, the stream's blocks on disk far smaller than the bytes it holds once
sealed, and everything read back after a restart; compression switched on by an update
(tidings only: the reference honours that after a restart)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import nats
import pytest
from nats.js.api import StorageType, StreamConfig

from tests.harness import start_reference, start_tidings

KINDS = ["tidings", "reference"]
COUNT = 3000


def payload(i: int) -> bytes:
    return b'{"order": %d, "customer": "customer-%d", "items": ["book", "pen"], "ok": true}' % (
        i, i % 40)


def on_disk(store: Path, stream: str) -> int:
    """The bytes of a stream's message blocks."""
    return sum(p.stat().st_size for p in store.glob(f"jetstream/*/streams/{stream}/msgs/*.blk"))


async def wait_smaller(store: Path, stream: str, twin: str) -> tuple[int, int]:
    """The bytes on disk of a compressed stream and of its twin, which holds the same
    messages uncompressed, once the first is at most 3/4 of the second (sealed blocks are
    compressed in the background, on both servers)."""
    deadline = time.monotonic() + 20
    while (size := on_disk(store, stream)) > 0.75 * (plain := on_disk(store, twin)) \
            and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return size, plain


def start(kind: str, store: Path):  # type: ignore[no-untyped-def]
    starter = start_tidings if kind == "tidings" else start_reference
    return starter(extra_args=["-js", "-sd", str(store)])


@pytest.mark.parametrize("kind", KINDS)
async def test_a_compressed_stream_holds_its_messages_in_less_space(kind: str,
                                                                   tmp_path: Path) -> None:
    store = tmp_path / kind
    srv = start(kind, store)
    try:
        nc = await nats.connect(srv.url)
        js = nc.jetstream()
        for name, compression in (("Z", "s2"), ("P", "none")):
            info = await js.add_stream(StreamConfig(
                name=name, subjects=[f"{name.lower()}.>"], storage=StorageType.FILE,
                compression=compression,
                max_bytes=120_000))  # (the block size follows: 32,000 bytes, as the reference's)
            assert info.config.compression == compression
        for name in ("z", "p"):
            acks = [js.publish(f"{name}.{i % 7}", payload(i)) for i in range(COUNT)]
            seqs = [ack.seq for ack in await asyncio.gather(*acks)]
            assert seqs == list(range(1, COUNT + 1))
        first = (await js.stream_info("Z")).state.first_seq  # (max_bytes discarded the rest)
        for seq in range(first, COUNT + 1):
            if seq % 5 == 1:
                for name in ("Z", "P"):
                    await js.delete_msg(name, seq)  # tombstones, some for compressed blocks
        state = (await js.stream_info("Z")).state
        twin = (await js.stream_info("P")).state
        assert (state.messages, state.bytes, state.first_seq) == (
            twin.messages, twin.bytes, twin.first_seq)
        size, plain = await wait_smaller(store, "Z", "P")
        assert size <= 0.75 * plain, (size, plain)
        await nc.close()
        srv.stop()

        srv.start()
        nc = await nats.connect(srv.url)
        js = nc.jetstream()
        again = (await js.stream_info("Z")).state
        assert (again.messages, again.bytes, again.first_seq, again.last_seq) == (
            state.messages, state.bytes, state.first_seq, state.last_seq)
        sub = await js.subscribe("z.>", ordered_consumer=True)
        for seq in range(first, COUNT + 1):
            if seq % 5 == 1:
                continue
            msg = await sub.next_msg(timeout=5)
            assert (msg.metadata.sequence.stream, msg.subject, msg.data) == (
                seq, f"z.{(seq - 1) % 7}", payload(seq - 1))
        await nc.close()
    finally:
        srv.stop()


async def test_compression_switched_on_by_an_update(tmp_path: Path) -> None:
    """On tidings at once, blocks sealed before included (the reference accepts the update
    but its file store keeps the compression it was opened with, until a restart)."""
    kind = "tidings"
    store = tmp_path / kind
    srv = start(kind, store)
    try:
        nc = await nats.connect(srv.url)
        js = nc.jetstream()
        for name in ("U", "P"):
            await js.add_stream(StreamConfig(name=name, subjects=[name.lower()],
                                             storage=StorageType.FILE, max_bytes=120_000))
            for i in range(COUNT // 2):
                await js.publish(name.lower(), payload(i))
        info = await js.update_stream(StreamConfig(
            name="U", subjects=["u"], storage=StorageType.FILE, max_bytes=120_000,
            compression="s2"))
        assert info.config.compression == "s2"
        for name in ("u", "p"):
            await asyncio.gather(*(js.publish(name, payload(i))
                                   for i in range(COUNT // 2, COUNT)))
        state = (await js.stream_info("U")).state
        size, plain = await wait_smaller(store, "U", "P")
        assert size <= 0.75 * plain, (size, plain)
        msg = await js.get_msg("U", state.last_seq)
        assert msg.data == payload(COUNT - 1)
        msg = await js.get_msg("U", state.first_seq)
        assert msg.data == payload(state.first_seq - 1)
        await nc.close()
    finally:
        srv.stop()
