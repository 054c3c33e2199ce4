"""What the `nats` data source's targets share when they publish rows: a record batch's
subjects, payloads and headers as Python lists, and acknowledged publishing (`AckedPublisher`: a window
of unanswered publishes, refusals, reconnecting and publishing again what was not answered),
on which the streaming target (writer.py) and the JetStream target (jswrite.py) both run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator
from typing import Any, Generic, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from ..client import errors as nats_errors
from ..protocol.headers import EncodedHeaders, Headers
from ..streaming.client import StanError
from .connection import ConnectionLost, ConnectorError, Losses
from .options import ConnectionOptions, OptionError, WriteOptions

R = TypeVar("R")  # a row, as the protocol publishes it
K = TypeVar("K", bound=Hashable)  # a row's key: what the protocol tells its answer by

# What a publish raises when the connection is gone (and, for others, a real failure).
SEND_ERRORS = (StanError, nats_errors.Error, OSError)


def columns(batch: pa.RecordBatch, default_subject: str | None
            ) -> tuple[list[str], list[bytes]]:
    """The batch's subjects (nulls: option subject) and payloads (bytes; null: empty)."""
    names = batch.schema.names
    if "subject" in names:
        col = batch.column(names.index("subject"))
        if col.null_count:
            if default_subject is None:
                raise OptionError("a row has a null subject and no option subject is set")
            col = pc.fill_null(col, default_subject)
        subjects = col.to_pylist()
    else:
        subjects = [default_subject] * batch.num_rows
    data = batch.column(names.index("data"))
    if not pa.types.is_binary(data.type):
        data = data.cast(pa.binary())  # strings: the same bytes, UTF-8
    if data.null_count:
        data = pc.fill_null(data, b"")
    return subjects, data.to_pylist()


def _texts(batch: pa.RecordBatch, column: str, header: str, required: bool) -> pa.Array:
    """A column's values as header values (integers in decimal); refused: a negative number,
    a line break, and where `required`, a null or an empty string."""
    col = batch.column(batch.schema.names.index(column))
    if required and col.null_count:
        raise OptionError(f"column {column!r} ({header}): a row has a null value")
    if pa.types.is_integer(col.type):
        low = pc.min(col).as_py()
        if low is not None and low < 0:
            raise OptionError(f"column {column!r} ({header}): a negative value ({low})")
        return col.cast(pa.string())
    if not pa.types.is_string(col.type):
        col = col.cast(pa.string())
    if pc.any(pc.match_substring_regex(col, "[\r\n]")).as_py():
        raise OptionError(f"column {column!r} ({header}): a value with a line break")
    if required and pc.any(pc.equal(pc.utf8_length(col), 0)).as_py():
        raise OptionError(f"column {column!r} ({header}): a row has an empty value")
    return col


_NO_HEADERS = b"NATS/1.0\r\n\r\n"


def header_rows(batch: pa.RecordBatch, wopts: WriteOptions) -> list[Headers | None] | None:
    """Each row's headers (None: a row without any), or None when no row has any: the
    `headers` column's, and those of the columns options name (which replace a header of
    the same name in `headers`; a null leaves the header out)."""
    own = [(header, _texts(batch, column, header, header == "Nats-Msg-Id"))
           for header, column in wopts.header_columns.items()]
    names = batch.schema.names
    if "headers" not in names:
        return _blocks(own) if own else None
    given = batch.column(names.index("headers")).to_pylist()
    mine = [(header, values.to_pylist()) for header, values in own]
    out: list[Headers | None] = []
    for i, row in enumerate(given):
        pairs = [(header, values[i]) for header, values in mine if values[i] is not None]
        if row:
            taken = {header.lower() for header, _ in pairs}
            pairs[:0] = [(name, _values(value)) for name, value in row
                         if value is not None and name.lower() not in taken]
        out.append(Headers(pairs) if pairs else None)
    return out


def _blocks(own: list[tuple[str, pa.Array]]) -> list[Headers | None]:
    """Header blocks of checked values, a column at a time."""
    lines = [pc.fill_null(pc.binary_join_element_wise(f"{header}: ", values, "\r\n", ""), "")
             for header, values in own]
    blocks = pc.binary_join_element_wise("NATS/1.0\r\n", *lines, "\r\n", "")
    return [None if block == _NO_HEADERS else EncodedHeaders(block)
            for block in blocks.cast(pa.binary()).to_pylist()]


def _values(value: str | list[str | None]) -> str | list[str]:
    """A header's value from a map<string,string> or map<string,array<string>> column."""
    return value if isinstance(value, str) else [v for v in value if v is not None]


class AckedPublisher(Generic[K, R]):
    """Publishes rows that the server answers one by one (stored, or refused), across lost
    connections.

    Every row stays in `unacked` (under a key from `keys`, unique in the task, in publish
    order) from just before its publish until its answer. At most `maxPubAcksInFlight` rows are unanswered:
    the next one waits for answers, and `pubAckWait` seconds without any fail the write. A
    refusal fails the write with the server's text (no row is published once it is known;
    rows published before it was may be stored). When the connection is lost, a new one is
    opened (for `reconnectTimeout`) and the unanswered rows are published again, in their
    order, before the next row: at least once, as a retried task would be (and once where the
    server drops what it already has, as JetStream does by `Nats-Msg-Id`).

    A protocol implements `keys` (its rows' keys, e.g. `itertools.count()`), `rows` (a record
    batch as its rows), `_connect` (a new connection,
    whose loss calls `lost`), `_send` (publish one row; its answer comes to `answered` or
    `unanswered`), and `self.conn` (a connection.NatsConnection: `_is_lost`, `_alive` and
    `_close` are its).
    """

    NO_ANSWER_HINT = ""  # what the protocol adds when PubAcks do not come

    def __init__(self, copts: ConnectionOptions, wopts: WriteOptions, keys: Iterator[K]
                 ) -> None:
        self.copts, self.wopts = copts, wopts
        self.keys = keys
        self.window = wopts.max_pub_acks_in_flight
        self.unacked: dict[K, R] = {}
        self.refused: list[str] = []  # the server's texts
        self.timed_out = False  # a publish got no answer in time (the protocol said so)
        self.answers = 0
        self.ready = False  # connected, and every unanswered row published on it
        self.losses = Losses()
        self._connections = 0
        self._waiter: asyncio.Future[None] | None = None
        self.conn: Any = None  # the protocol's connection (connection.NatsConnection's kind)

    # -- the protocol's part ---------------------------------------------------------------

    def rows(self, batch: pa.RecordBatch) -> Iterable[R]:
        """A record batch's rows as `_send` publishes them (checked: a bad one raises)."""
        raise NotImplementedError

    async def _connect(self) -> None:
        """A new connection; its loss must call `lost`."""
        raise NotImplementedError

    def _send(self, key: K, row: R) -> Awaitable[object]:
        """Publish `row` (awaited: the publish itself, no coroutine of its own on the hot
        path); its answer must come to `answered(key, ...)` or `unanswered`."""
        raise NotImplementedError

    def _is_lost(self, exc: BaseException) -> bool:
        """Whether `exc`, raised by `_send`, says the connection is gone."""
        return self.conn is not None and isinstance(self.conn.check(exc), ConnectionLost)

    def _send_failed(self, exc: BaseException, row: R) -> BaseException:
        """What to raise for `exc`, raised by `_send` while connected (by default itself)."""
        return exc

    def _alive(self) -> bool:
        return self.conn is not None and self.conn.alive()

    async def _close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    # -- what the protocol tells ------------------------------------------------------------

    def answered(self, key: K, refusal: str | None = None) -> None:
        """The server's answer to row `key`: stored (None), or refused with this text."""
        if self.unacked.pop(key, None) is None:
            return  # answered already
        self.answers += 1
        if refusal is not None:
            self.refused.append(refusal)
        waiter = self._waiter  # (_wake, inline: once per row)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def unanswered(self, key: K) -> None:
        """Row `key` got no answer within `pubAckWait` (where the protocol times out)."""
        if self.unacked.pop(key, None) is not None:
            self.timed_out = True
            self._wake()

    def lost(self, err: BaseException | None = None) -> None:
        """The connection went away: the unanswered rows go again on the next one."""
        self.ready = False
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- publishing -------------------------------------------------------------------------

    async def write(self, batches: Iterator[pa.RecordBatch]) -> int:
        """Publish every row of `batches`; their number once all are stored."""
        count = 0
        try:
            for batch in batches:
                await self.publish(self.rows(batch))
                count += batch.num_rows
            await self.finish()
        finally:
            await self.close()
        return count

    async def publish(self, rows: Iterable[R]) -> None:
        """Publish `rows` in order; returns once each is sent (not yet answered)."""
        unacked, window, send, keys = self.unacked, self.window, self._send, self.keys
        self._check()
        for row in rows:
            if len(unacked) >= window or not self.ready or self.refused:
                await self._wait(self._has_room)
            key = next(keys)
            unacked[key] = row
            try:
                await send(key, row)
            except SEND_ERRORS as exc:
                if not self._is_lost(exc):
                    raise self._send_failed(exc, row) from exc
                self.ready = False  # `row` goes again on the next connection

    async def finish(self) -> None:
        """Until every row is answered; raises on a refusal (or on no answer in time)."""
        if self.unacked:
            await self._wait(lambda: not self.unacked)
        self._check()

    async def close(self) -> None:
        await self._close()

    def _has_room(self) -> bool:
        return len(self.unacked) < self.window

    async def _wait(self, enough: Callable[[], bool]) -> None:
        """Until `enough()`, connected: answers come in, a lost connection is opened again."""
        loop = asyncio.get_running_loop()
        while True:
            self._check()
            if not self.ready:
                await self._open()
                continue
            if enough():
                return
            answers = self.answers
            waiter = self._waiter = loop.create_future()
            try:
                async with asyncio.timeout(self.wopts.pub_ack_wait):
                    await waiter
            except TimeoutError:
                if answers == self.answers and self.ready:
                    self.timed_out = True
            finally:
                self._waiter = None

    def _check(self) -> None:
        """Fail the write on a refusal or a publish left unanswered."""
        if self.refused:
            raise ConnectorError(f"{len(self.refused)} messages refused: {self.refused[0]}")
        if self.timed_out:
            raise ConnectorError(f"no PubAck from {', '.join(self.copts.servers)} within "
                                 f"{self.wopts.pub_ack_wait:g} s (pubAckWait)"
                                 f"{self.NO_ANSWER_HINT}")

    async def _open(self) -> None:
        """A new connection, on which every unanswered row has been published (again)."""
        while True:
            if self._connections:
                self.losses.lost(self.answers, ConnectionLost(
                    f"lost the connection to {', '.join(self.copts.servers)}"))
            self._connections += 1
            await self._close()
            try:
                await self._connect()
                for key, row in list(self.unacked.items()):
                    await self._send(key, row)  # (each was sent once: no refusal of its own)
            except SEND_ERRORS as exc:
                if not self._is_lost(exc):
                    raise
                continue
            if self._alive():
                self.ready = True
                return
