"""Client events, delivered in order by one task so user callbacks never stall the connection.

Kinds: connected, disconnected, reconnected, closed, lame_duck, discovered_server, error,
slow_consumer. Each goes to `event_cb(kind, arg)` if given, then to nats-py's matching callback
(`error` and `slow_consumer` to `error_cb(exc)`; the others take no argument). Callbacks may be
coroutine functions or plain functions; an exception in one is logged and the next event runs.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("tidings.client")

EventCallback = Callable[[str, Any], Awaitable[None] | None]
_WITH_ERROR = ("error", "slow_consumer")
STOP_WAIT = 5.0  # seconds close() waits for callbacks still running


async def _call(cb: Callable[..., Any], *args: Any) -> None:
    res = cb(*args)
    if inspect.isawaitable(res):
        await res


class EventDispatcher:
    """A queue of events and the task that runs their callbacks; it ends after `closed`."""

    def __init__(self, callbacks: dict[str, Callable[..., Any] | None],
                 event_cb: EventCallback | None) -> None:
        self._callbacks = callbacks
        self._event_cb = event_cb
        self._queue: deque[tuple[str, Any]] = deque()
        self._wake: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] = asyncio.get_running_loop().create_task(self._run())

    def emit(self, kind: str, arg: Any = None) -> None:
        if self._task.done():
            return
        self._queue.append((kind, arg))
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while self._queue:
                kind, arg = self._queue.popleft()
                await self._dispatch(kind, arg)
                if kind == "closed":
                    return
            self._wake = loop.create_future()
            await self._wake

    async def _dispatch(self, kind: str, arg: Any) -> None:
        try:
            if self._event_cb is not None:
                await _call(self._event_cb, kind, arg)
            if kind in _WITH_ERROR:
                cb = self._callbacks.get("error")
                if cb is None:
                    log.error("nats: encountered error: %s", arg)
                else:
                    await _call(cb, arg)
            else:
                cb = self._callbacks.get(kind)
                if cb is not None:
                    await _call(cb)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("nats: %s callback failed", kind)

    async def stop(self) -> None:
        """Let queued events up to `closed` run (at most STOP_WAIT seconds), else cancel."""
        task = self._task
        if task.done() or task is asyncio.current_task():
            return  # a callback that closes the client must not wait for itself
        if not any(kind == "closed" for kind, _ in self._queue):
            task.cancel()
        try:
            await asyncio.wait([task], timeout=STOP_WAIT)
        finally:
            if not task.done():
                task.cancel()
