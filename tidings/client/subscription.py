"""Subscriptions: a pending queue per subscription, read by a callback task or an iterator.

Messages are appended by the connection's read path (no task per message); a consumer waiting
on an empty queue is woken once per batch. Pending limits (messages and bytes) drop what does
not fit and raise one slow-consumer event per episode (not one per dropped message).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from . import errors
from .msg import Msg

log = logging.getLogger("tidings.client")

if TYPE_CHECKING:
    from .client import Client

DEFAULT_SUB_PENDING_MSGS_LIMIT = 512 * 1024
DEFAULT_SUB_PENDING_BYTES_LIMIT = 128 * 1024 * 1024

MsgCallback = Callable[[Msg], Awaitable[None]]


class Subscription:
    """Interest in a subject; created by `Client.subscribe`."""

    def __init__(
        self,
        client: Client,
        sid: int,
        subject: str,
        queue: str = "",
        cb: MsgCallback | None = None,
        max_msgs: int = 0,
        pending_msgs_limit: int = DEFAULT_SUB_PENDING_MSGS_LIMIT,
        pending_bytes_limit: int = DEFAULT_SUB_PENDING_BYTES_LIMIT,
    ) -> None:
        self._client = client
        self._loop = client._loop
        self._id = sid
        self._sid = b"%d" % sid
        self._subject = subject
        self._queue_name = queue
        self._cb = cb
        self._max_msgs = max_msgs
        self._received = 0  # messages the server sent us, dropped ones included
        # Raw fields, not Msg objects: a tuple of bytes is dropped from the cyclic GC's watch
        # at its first collection, so a long queue costs the collector nothing; the Msg is
        # made when the message is handed out.
        self._pending: deque[tuple[bytes, bytes | None, bytes, bytes | None]] = deque()
        self._pending_bytes = 0
        self._pml = pending_msgs_limit if pending_msgs_limit > 0 else 1 << 62
        self._pbl = pending_bytes_limit if pending_bytes_limit > 0 else 1 << 62
        self._dropped = 0
        self._slow = False
        self._waiters: list[asyncio.Future[None]] = []
        self._consumed_waiters: list[asyncio.Future[None]] = []
        self._closed = False  # no further messages will be added
        self._task: asyncio.Task[None] | None = None
        self._iterator: _MessageIterator | None = None

    # -- properties (as nats-py) ---------------------------------------------
    @property
    def subject(self) -> str:
        return self._subject

    @property
    def queue(self) -> str:
        return self._queue_name

    @property
    def sid(self) -> int:
        return self._id

    @property
    def pending_msgs(self) -> int:
        return len(self._pending)

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    @property
    def delivered(self) -> int:
        return self._received

    @property
    def dropped(self) -> int:
        """Messages dropped because the pending limits were reached."""
        return self._dropped

    @property
    def max_msgs(self) -> int:
        return self._max_msgs

    @property
    def messages(self) -> AsyncIterator[Msg]:
        """An async iterator over the messages; it ends when the subscription does."""
        if self._iterator is None:
            raise errors.Error(
                "cannot iterate over messages with a non iteration subscription type"
            )
        return self._iterator

    # -- read path (called by the client for every MSG) ----------------------
    def _deliver(self, subject: bytes, reply: bytes | None, hdr: bytes | None,
                 payload: bytes) -> None:
        self._received += 1
        q = self._pending
        if len(q) >= self._pml or self._pending_bytes + len(payload) > self._pbl:
            self._dropped += 1
            if not self._slow:
                self._slow = True
                self._client._slow_consumer(self, subject, reply)
        else:
            if self._slow and len(q) * 2 <= self._pml and self._pending_bytes * 2 <= self._pbl:
                self._slow = False
            q.append((subject, reply, payload, hdr))
            self._pending_bytes += len(payload)
            if self._waiters:
                self._wake()
        if self._max_msgs and self._received >= self._max_msgs:
            self._client._remove_sub(self)
            self._finish()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    async def _wait(self) -> None:
        fut = self._loop.create_future()
        self._waiters.append(fut)
        await fut

    def _pop(self) -> Msg:
        subject, reply, payload, hdr = self._pending.popleft()
        self._pending_bytes -= len(payload)
        if not self._pending and self._consumed_waiters:
            self._wake_consumed()
        return Msg(self._client, subject, reply, payload, hdr, self._id)

    def _wake_consumed(self) -> None:
        waiters, self._consumed_waiters = self._consumed_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    # -- lifecycle -----------------------------------------------------------
    def _start(self) -> None:
        if self._cb is not None:
            if not callable(self._cb):
                raise errors.InvalidCallbackTypeError()
            self._task = self._loop.create_task(self._run_callbacks())
        else:
            self._iterator = _MessageIterator(self)

    async def _run_callbacks(self) -> None:
        cb = self._cb
        assert cb is not None
        is_coro = inspect.iscoroutinefunction(cb) or inspect.iscoroutinefunction(
            getattr(cb, "func", None))
        q = self._pending
        while True:
            while q:
                msg = self._pop()
                try:
                    if is_coro:
                        await cb(msg)
                    else:
                        res = cb(msg)
                        if inspect.isawaitable(res):
                            await res
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._client._callback_error(exc)
            if self._closed:
                return
            await self._wait()

    def _finish(self) -> None:
        """No more messages will arrive; consumers end once the queue is empty."""
        self._closed = True
        self._wake()
        if not self._pending:
            self._wake_consumed()

    def _discard(self) -> None:
        """End now, dropping what is queued (unsubscribe, close)."""
        self._pending.clear()
        self._pending_bytes = 0
        self._finish()
        if self._task is not None and not self._task.done():
            if self._task is not asyncio.current_task():
                self._task.cancel()

    async def _wait_consumed(self) -> None:
        """Until every queued message has been handed out (and, with a callback, handled)."""
        if self._task is not None:
            if self._task is not asyncio.current_task():
                await asyncio.wait([self._task])
            return
        while self._pending:
            fut = self._loop.create_future()
            self._consumed_waiters.append(fut)
            await fut

    # -- API -----------------------------------------------------------------
    async def next_msg(self, timeout: float | None = 1.0) -> Msg:
        """The next message; `errors.TimeoutError` after `timeout` seconds (None: no limit)."""
        if self._cb is not None:
            raise errors.Error("nats: next_msg cannot be used in async subscriptions")
        if self._pending:
            return self._pop()
        if self._closed:
            if self._client.is_closed:
                raise errors.ConnectionClosedError()
            raise errors.BadSubscriptionError()
        loop = self._loop
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            fut = loop.create_future()
            self._waiters.append(fut)
            timer = None
            if deadline is not None:
                timer = loop.call_at(deadline, _wake_future, fut)
            try:
                await fut
            finally:
                if timer is not None:
                    timer.cancel()
            if self._pending:
                return self._pop()
            if self._closed:
                if self._client.is_closed:
                    raise errors.ConnectionClosedError()
                raise errors.BadSubscriptionError()
            if deadline is not None and loop.time() >= deadline:
                raise errors.TimeoutError()

    async def unsubscribe(self, limit: int = 0) -> None:
        """Remove interest now, or after `limit` messages in all (auto-unsubscribe)."""
        client = self._client
        if client.is_closed:
            raise errors.ConnectionClosedError()
        if client.is_draining:
            raise errors.ConnectionDrainingError()
        if self._closed:
            raise errors.BadSubscriptionError()
        self._max_msgs = limit
        if limit <= 0 or self._received >= limit:
            client._remove_sub(self)
            client._send_unsub(self._sid, 0)
            if limit <= 0:
                self._discard()
            else:
                self._finish()
        else:
            client._send_unsub(self._sid, limit)

    async def drain(self) -> None:
        """Remove interest, but hand out the messages already on their way or queued."""
        client = self._client
        if client.is_closed:
            raise errors.ConnectionClosedError()
        if client.is_draining:
            raise errors.ConnectionDrainingError()
        if self._closed:
            raise errors.BadSubscriptionError()
        await self._drain()

    async def _drain(self) -> None:
        client = self._client
        client._send_unsub(self._sid, 0)
        try:
            await client.flush()
        except errors.Error:
            pass
        client._remove_sub(self)
        self._finish()
        await self._wait_consumed()

    def __repr__(self) -> str:
        return f"<Subscription sid={self._id} subject={self._subject!r} queue={self._queue_name!r}>"


def _wake_future(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class _MessageIterator:
    """`sub.messages`: yields queued messages without suspending while any are queued."""

    __slots__ = ("_sub",)

    def __init__(self, sub: Subscription) -> None:
        self._sub = sub

    def __aiter__(self) -> _MessageIterator:
        return self

    async def __anext__(self) -> Msg:
        sub = self._sub
        q = sub._pending
        while True:
            if q:
                subject, reply, payload, hdr = q.popleft()
                sub._pending_bytes -= len(payload)
                if not q and sub._consumed_waiters:
                    sub._wake_consumed()
                return Msg(sub._client, subject, reply, payload, hdr, sub._id)
            if sub._closed:
                raise StopAsyncIteration
            fut = sub._loop.create_future()
            sub._waiters.append(fut)
            await fut


class ResponseMux(Subscription):
    """The one `_INBOX.<id>.*` subscription that routes replies to waiting requests."""

    def __init__(self, client: Client, sid: int, prefix: bytes) -> None:
        super().__init__(client, sid, (prefix + b"*").decode())
        self._plen = len(prefix)
        self.waiting: dict[bytes, asyncio.Future[Msg]] = {}

    def _start(self) -> None:
        pass

    def _deliver(self, subject: bytes, reply: bytes | None, hdr: bytes | None,
                 payload: bytes) -> None:
        self._received += 1
        fut = self.waiting.pop(subject[self._plen:], None)
        if fut is not None and not fut.done():
            fut.set_result(Msg(self._client, subject, reply, payload, hdr, self._id))


RawCallback = Callable[[bytes, "bytes | None", "bytes | None", bytes], None]


class RawSubscription(Subscription):
    """A subscription whose messages go straight from the read path to a plain function.

    `raw_cb(subject, reply, headers_block, payload)` runs synchronously for every message:
    no Msg object, no queue, no task. It must not block; what it raises is logged.
    """

    def __init__(self, client: Client, sid: int, subject: str, queue: str,
                 raw_cb: RawCallback, max_msgs: int = 0) -> None:
        super().__init__(client, sid, subject, queue, None, max_msgs)
        self._raw_cb = raw_cb

    def _start(self) -> None:
        pass

    def _deliver(self, subject: bytes, reply: bytes | None, hdr: bytes | None,
                 payload: bytes) -> None:
        self._received += 1
        try:
            self._raw_cb(subject, reply, hdr, payload)
        except Exception:
            log.exception("raw subscription callback failed on %r", subject)
        if self._max_msgs and self._received >= self._max_msgs:
            self._client._remove_sub(self)
            self._finish()
