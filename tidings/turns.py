"""Turns of the event loop, and the input budget a connection gets per turn.

libuv (under uvloop) hands a readable socket over in up to 32 reads in one turn of the loop,
and one read can hold hundreds of operations: parsed all at once they can hold every other
connection up for tens of milliseconds. So a connection, the server's side of a client as
well as the client library's, parses input for at most INPUT_BUDGET seconds per turn; past
that its socket is not read again until the next turn.
"""

from __future__ import annotations

import asyncio
import time

INPUT_BUDGET = 0.002  # seconds of input parsing per connection and loop turn


class LoopTurns:
    """Numbers the turns of one event loop: `current()` changes once the callbacks of this
    turn have run (a callback scheduled by the first call of a turn marks its end)."""

    __slots__ = ("_loop", "_turn", "_open")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._turn = 0
        self._open = False

    def current(self) -> int:
        if not self._open:
            self._open = True
            self._turn += 1
            self._loop.call_soon(self._close)
        return self._turn

    def _close(self) -> None:
        self._open = False


class InputBudget:
    """One connection's share of each loop turn: `start()` on every read, `spent()` after it
    (or between the slices of a large one)."""

    __slots__ = ("_turns", "_turn", "end")

    def __init__(self, turns: LoopTurns) -> None:
        self._turns = turns
        self._turn = 0
        self.end = 0.0  # perf_counter() time at which this turn's budget is spent

    def start(self) -> None:
        """Open this turn's budget on the connection's first read of the turn."""
        turn = self._turns.current()
        if turn != self._turn:
            self._turn = turn
            self.end = time.perf_counter() + INPUT_BUDGET

    def spent(self) -> bool:
        return time.perf_counter() > self.end
