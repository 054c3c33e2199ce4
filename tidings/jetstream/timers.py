"""A timer that fires at the earliest time it was asked for (a consumer's next deadline, a
stream's next expiry): asking for a later time keeps the earlier one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class EarliestTimer:
    __slots__ = ("loop", "callback", "due", "handle")

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self.loop = loop
        self.callback = callback
        self.due = 0.0
        # (its time kept beside it: uvloop's call_at of a time already past returns a
        # handle that does not know its time)
        self.handle: asyncio.Handle | None = None

    def at(self, when: float) -> None:
        """Fire at `when` (loop time) unless it is armed for that or earlier."""
        if self.handle is not None and not self.handle.cancelled():
            if self.due <= when:
                return
            self.handle.cancel()
        self.due = when
        self.handle = self.loop.call_at(when, self._fire)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None

    def _fire(self) -> None:
        self.handle = None
        self.callback()
