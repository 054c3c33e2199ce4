"""The in-process pipe (tidings/pipe.py): two protocols joined in memory behave as over a
socket: bytes in order and never inside write(), reads bounded, reading paused and resumed,
the writer paused past its high-water mark, close delivering what was written, abort not."""

from __future__ import annotations

import asyncio

from tidings.pipe import READ_SIZE, open_pipe


class Recorder(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reads: list[bytes] = []
        self.lost: list[Exception | None] = []
        self.events: list[str] = []
        self.in_write = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        self.reads.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.append(exc)

    def pause_writing(self) -> None:
        self.events.append("pause")

    def resume_writing(self) -> None:
        self.events.append("resume")

    @property
    def received(self) -> bytes:
        return b"".join(self.reads)


async def settle(turns: int = 5) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


async def test_bytes_arrive_in_order_after_write_returns_and_both_ways() -> None:
    client, server = Recorder(), Recorder()
    near, far = open_pipe(asyncio.get_running_loop(), client, server)
    assert server.events == ["made"] and client.events == ["made"]
    near.write(b"PING\r\n")
    near.write(bytearray(b"PUB a 1\r\nx\r\n"))
    assert server.reads == []  # never delivered inside write()
    far.write(b"PONG\r\n")
    await settle()
    assert server.received == b"PING\r\nPUB a 1\r\nx\r\n"
    assert client.received == b"PONG\r\n"
    assert len(server.reads) == 1  # what was written in one turn is one read


async def test_a_large_write_arrives_in_bounded_reads() -> None:
    client, server = Recorder(), Recorder()
    near, _ = open_pipe(asyncio.get_running_loop(), client, server)
    data = bytes(range(256)) * (3 * READ_SIZE // 256 + 7)
    near.write(data)
    await settle(10)
    assert server.received == data
    assert max(map(len, server.reads)) <= READ_SIZE and len(server.reads) == 4


async def test_paused_reader_holds_bytes_and_pauses_the_writer() -> None:
    client, server = Recorder(), Recorder()
    near, far = open_pipe(asyncio.get_running_loop(), client, server)
    near.set_write_buffer_limits(high=1000, low=100)
    far.pause_reading()
    near.write(b"x" * 600)
    near.write(b"y" * 600)
    await settle()
    assert server.reads == []
    assert near.get_write_buffer_size() == 1200
    assert client.events == ["made", "pause"]
    far.resume_reading()
    await settle()
    assert server.received == b"x" * 600 + b"y" * 600
    assert near.get_write_buffer_size() == 0
    assert client.events == ["made", "pause", "resume"]


async def test_close_delivers_what_was_written_then_both_ends_are_lost_once() -> None:
    client, server = Recorder(), Recorder()
    _, far = open_pipe(asyncio.get_running_loop(), client, server)
    far.write(b"-ERR 'Authorization Violation'\r\n")
    far.close()
    far.write(b"not sent")
    assert far.is_closing()
    await settle()
    assert client.received == b"-ERR 'Authorization Violation'\r\n"
    assert client.lost == [None] and server.lost == [None]
    far.close()
    far.abort()
    await settle()
    assert client.lost == [None] and server.lost == [None]


async def test_abort_drops_what_was_not_read() -> None:
    client, server = Recorder(), Recorder()
    near, far = open_pipe(asyncio.get_running_loop(), client, server)
    far.pause_reading()
    near.write(b"lost")
    near.abort()
    await settle()
    assert server.reads == []
    assert client.lost == [None] and server.lost == [None]
