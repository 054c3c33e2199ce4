"""The connector's NATS connection, whatever protocol it speaks over it (NATS Streaming,
JetStream): connecting with retries for `reconnectTimeout`, telling a lost connection from
a refusal, and the errors the `nats` data source raises.

A connection lost while in use calls the `on_lost` callbacks (a read waiting for messages is
woken) and `check` turns any error seen meanwhile into ConnectionLost; callers open a new
connection to resume. `Losses` stops a task whose server drops it again and again without the
work moving on.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..client import Client
from ..client import errors as nats_errors
from ..client.nuid import NUID
from ..streaming.client import StanError
from .options import ConnectionOptions

T = TypeVar("T")

_nuid = NUID()
_nuid_pid = os.getpid()


def unique_id() -> str:
    """A NUID, fresh per process: Spark forks its Python workers, and a forked copy of one
    generator would hand two workers the same client id."""
    global _nuid, _nuid_pid
    if _nuid_pid != os.getpid():
        _nuid, _nuid_pid = NUID(), os.getpid()
    return _nuid.next().decode()


class ConnectorError(StanError):
    """An error of the `nats` data source (a StanError too: what its first protocol raised)."""


class ConnectionLost(ConnectorError):
    """The connection to the server went away while in use (the caller may reconnect)."""


# Refusals that trying again will not change.
_FINAL = (nats_errors.ServerError, nats_errors.SecureConnWantedError,
          nats_errors.SecureConnFailedError, nats_errors.InvalidUserCredentialsError)
RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.5)  # between connect attempts; then every 0.5 s


class Losses:
    """Counts connections lost in a row while the work stood still (`at` the same progress):
    a server that drops the connection every time (before anything moves on) fails the task
    instead of holding it in a loop of reconnects."""

    LIMIT = 3

    def __init__(self) -> None:
        self.at: object = None
        self.count = 0

    def lost(self, at: object, err: StanError) -> None:
        if at == self.at:
            self.count += 1
        else:
            self.at, self.count = at, 1
        if self.count >= self.LIMIT:
            raise ConnectorError(
                f"{err} ({self.count} times in a row without progress)") from err


class NatsConnection:
    """One NATS connection of the connector, with a client name unique per Spark worker
    process (`<clientIdPrefix>-<role>-<nuid>`)."""

    def __init__(self, copts: ConnectionOptions, role: str) -> None:
        self.copts = copts
        self.client_id = f"{copts.client_id_prefix}-{role}-{unique_id()}"
        self.nc: Client | None = None
        self.on_lost: list[Callable[[ConnectionLost], None]] = []
        self._connected = False  # once connected, a failure may be a lost connection
        self._deadline: float | None = None  # of the retries (see `retrying`)
        self._closing = False

    @property
    def servers(self) -> str:
        return ", ".join(self.copts.servers)

    async def retrying(self, attempt: Callable[[], Awaitable[T]], retry_on: Callable[
            [BaseException], bool], what: str) -> T:
        """`attempt()` until it succeeds, a final error, or this connection's
        `reconnectTimeout` has passed: one window from its first attempt for all its steps
        (NATS, a protocol's registration, a first read), so they cannot add up."""
        loop = asyncio.get_running_loop()
        wait = self.copts.reconnect_timeout
        if self._deadline is None:
            self._deadline = loop.time() + wait
        deadline = self._deadline
        for tries in itertools.count():
            try:
                return await attempt()
            except (nats_errors.Error, StanError, OSError) as exc:
                if not retry_on(exc):
                    raise
                delay = RETRY_DELAYS[min(tries, len(RETRY_DELAYS) - 1)]
                if loop.time() + delay > deadline:
                    raise ConnectorError(f"{what} at {self.servers}: still failing after "
                                         f"{wait:g} s (reconnectTimeout): {exc}") from exc
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def connect_nats(self) -> NatsConnection:
        """The NATS connection (tried again until `reconnectTimeout`, unless refused)."""
        copts = self.copts

        async def attempt() -> Client:
            nc = Client()
            await nc.connect(list(copts.servers), event_cb=self._on_event,
                             **copts.client_kwargs(self.client_id))
            return nc

        def retry(exc: BaseException) -> bool:
            cause = exc.__cause__ if isinstance(exc, nats_errors.NoServersError) else exc
            return not isinstance(exc, _FINAL) and not isinstance(cause, _FINAL)

        try:
            self.nc = await self.retrying(attempt, retry, "connecting to NATS")
        except (nats_errors.Error, OSError) as exc:  # a final refusal
            raise ConnectorError(f"cannot connect to {self.servers}: {exc}") from exc
        self._connected = True
        return self

    def _on_event(self, kind: str, reason: object) -> None:
        if kind != "disconnected" or self._closing:
            return
        self.lost(ConnectionLost(f"lost the connection to {self.servers}: "
                                 f"{reason or 'closed'}"))

    def lost(self, err: ConnectionLost) -> None:
        """The connection went away: tell who waits on it."""
        for cb in self.on_lost:
            cb(err)

    def alive(self) -> bool:
        """Connected (and, in a subclass, its protocol's session alive too)."""
        return self.nc is not None and self.nc.is_connected

    def check(self, exc: BaseException) -> BaseException:
        """`exc` as ConnectionLost when the connection is gone (what a caller may retry)."""
        if isinstance(exc, ConnectionLost) or not self._connected or self.alive() or (
                self._closing):
            return exc
        lost = ConnectionLost(f"lost the connection to {self.servers}: {exc}")
        lost.__cause__ = exc
        return lost

    async def close(self) -> None:
        self._closing = True
        nc, self.nc = self.nc, None
        if nc is not None:
            await nc.close()
