"""What the driver needs to know about channels: their sequence bounds, and which exist.

Two ways to find out:

- the streaming protocol (default): a channel's last sequence is the one a LastReceived
  subscription delivers, its first the one a First subscription delivers (see `StreamingClient.peek`);
  nothing else is needed, but channels cannot be listed;
- the streaming server's monitoring endpoint (`monitorUrl`, e.g. `http://127.0.0.1:8222`):
  `/streaming/channelsz?channel=X` gives `first_seq`/`last_seq` and `/streaming/channelsz`
  lists the channel names, which `channelPattern` needs.

The driver's streaming connection runs on an event loop in a daemon thread; connecting keeps
trying for `reconnectTimeout`, and a call that finds the connection lost is run again once on a
new one; `close` unregisters it. The stream reader closes it at the end of each of
Spark's calls: Spark ends that process without a `stop()`, and a client left open would stay
registered on the server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..client import errors as nats_errors
from .connection import ConnectionLost
from .options import ConnectionOptions, OptionError, ReadOptions
from .planning import name_matches
from .stan import ChannelInfo, Probe, StanConnection, StanError

T = TypeVar("T")
TIME_SLACK_NS = 2_000_000_000


class LoopThread:
    """An asyncio loop running in a daemon thread; `run` executes a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="tidings-spark",
                                       daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
        if not self.loop.is_running():
            self.loop.close()


class DriverLink:
    """The driver's connection of a catalog, on a LoopThread: made when first needed, a call
    that finds it lost run again once on a new one, closed by `close`."""

    def __init__(self, copts: ConnectionOptions, role: str) -> None:
        self.copts = copts
        self.role = role
        self._lt: LoopThread | None = None
        self._conn: Any = None
        self.sizes: dict[str, int] = {}  # name -> estimated bytes of one message's data

    def _new_connection(self, lost: Any) -> Any:
        """A connection (not yet connected) taking over from `lost` (None at first)."""
        raise NotImplementedError

    def _run(self, make: Any) -> Any:
        """Run `make(conn)` on the driver connection, reconnecting once if it was lost."""
        if self._lt is None:
            self._lt = LoopThread()
        lost: Any = None
        for attempt in (1, 2):
            if self._conn is None:
                conn = self._new_connection(lost)
                self._lt.run(conn.connect_nats())  # (a protocol registers when it is needed)
                self._conn = conn
            try:
                return self._lt.run(make(self._conn))
            except (StanError, nats_errors.Error, OSError) as exc:
                if attempt == 2 or not isinstance(self._conn.check(exc), ConnectionLost):
                    raise
                lost = self._conn
                self._close_conn()
        raise AssertionError("unreachable")

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and self._lt is not None:
            try:
                self._lt.run(conn.close(), timeout=self.copts.request_timeout + 5)
            except Exception:  # noqa: BLE001 - closing a broken connection is best effort
                pass

    def close(self) -> None:
        self._close_conn()
        if self._lt is not None:
            self._lt.stop()
            self._lt = None


class ChannelCatalog(DriverLink):
    """NATS Streaming channels: the catalog of the `nats` source's channel backend."""

    def __init__(self, copts: ConnectionOptions, role: str = "d") -> None:
        super().__init__(copts, role)
        self._fetch: bool | None = None

    def _new_connection(self, lost: Any) -> StanConnection:
        return StanConnection(self.copts, self.role, replaces=lost)

    def fetch_supported(self) -> bool:
        """Whether the server answers tidings bulk fetches (asked once per catalog)."""
        if self._fetch is None:
            from .fetch import fetch_once, fetch_subject

            subject = fetch_subject(self.copts.cluster_id)

            async def ask(conn: StanConnection) -> bool:
                try:  # any valid channel name will do: an unknown one is an answer too
                    await fetch_once(conn.nc, subject, "_tidings.probe", 1, 1,
                                     self.copts.request_timeout)
                except (nats_errors.NoRespondersError, nats_errors.TimeoutError):
                    return False
                return True

            self._fetch = bool(self._run(ask))
        return self._fetch

    def partitioning(self, ropts: ReadOptions, params: Any) -> tuple[int, Any]:
        """Messages a partition holds at most, and the read parameters (bulk fetches where
        the server answers them)."""
        fetching = ropts.fetch and self.fetch_supported()
        return ropts.partition_size(fetching), dataclasses.replace(params, fetch=fetching)

    def hint(self, name: str) -> str:
        return ""  # (a channel is read one way: the read parameters say which)

    # -- monitoring endpoint ------------------------------------------------
    def _http(self, path: str, **params: Any) -> dict[str, Any]:
        base = (self.copts.monitor_url or "").rstrip("/")
        url = f"{base}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=self.copts.request_timeout) as resp:
                return json.loads(resp.read())
        except OSError as exc:
            raise StanError(f"monitoring endpoint {url}: {exc}") from exc

    # -- what the data source asks ------------------------------------------
    def info(self, channels: list[str] | tuple[str, ...]) -> dict[str, ChannelInfo | None]:
        """{channel: ChannelInfo(first, last, message size), or None when empty}."""
        if self.copts.monitor_url:
            out: dict[str, ChannelInfo | None] = {}
            for ch in channels:
                try:
                    z = self._http("/streaming/channelsz", channel=ch)
                except StanError as exc:
                    if "404" in str(exc):  # the channel does not exist (yet)
                        out[ch] = None
                        continue
                    raise
                first, last = max(int(z.get("first_seq", 0)), 1), int(z.get("last_seq", 0))
                msgs = int(z.get("msgs", 0))
                size = int(z.get("bytes", 0)) // msgs if msgs else 0
                out[ch] = ChannelInfo(first, last, size) if last >= first else None
            for ch, ci in out.items():
                if ci is not None:
                    self.sizes[ch] = ci.msg_size
            return out

        async def probe_all(conn: StanConnection) -> dict[str, ChannelInfo | None]:
            return {ch: await conn.info(ch) for ch in channels}

        out = self._run(probe_all)
        for ch, ci in out.items():
            if ci is not None:
                self.sizes[ch] = ci.msg_size
        return out

    def last_sequences(self, channels: list[str] | tuple[str, ...]) -> dict[str, int]:
        """{channel: last sequence (0 when empty)}; notes message sizes in `sizes`."""
        if self.copts.monitor_url:
            return {ch: (ci.last if ci else 0) for ch, ci in self.info(channels).items()}

        async def probe_all(conn: StanConnection) -> dict[str, Probe | None]:
            return {ch: await conn.probe(ch, "last_received") for ch in channels}

        out = {}
        for ch, got in self._run(probe_all).items():
            out[ch] = got.sequence if got else 0
            if got is not None:
                self.sizes[ch] = max(got.size, self.sizes.get(ch, 0))
        return out

    def first_at_or_after(self, channels: list[str] | tuple[str, ...], time_ns: int
                          ) -> dict[str, int | None]:
        """{channel: a sequence at or shortly before the first stored at `time_ns`, or None}.

        TimeDeltaStart counts back from the server's clock when the request arrives, which is a
        little after this process computed the delta; the delta is widened by `TIME_SLACK_NS`
        so no message is missed, and readers skip what is older than `time_ns`.
        """
        delta = time.time_ns() - time_ns + TIME_SLACK_NS
        if delta <= 0:
            return dict.fromkeys(channels)

        async def probe_all(conn: StanConnection) -> dict[str, int | None]:
            out: dict[str, int | None] = {}
            for ch in channels:
                got = await conn.probe(ch, "time", delta_ns=delta)
                out[ch] = got.sequence if got else None
            return out

        return self._run(probe_all)

    def discover(self, pattern: str) -> list[str]:
        """Channel names matching a NATS-style pattern (needs the monitoring endpoint)."""
        if not self.copts.monitor_url:
            raise OptionError("option channelPattern needs option monitorUrl (the streaming "
                              "server's monitoring address, e.g. http://127.0.0.1:8222)")
        names: list[str] = []
        offset = 0
        while True:
            page = self._http("/streaming/channelsz", offset=offset, limit=1024)
            batch = page.get("names") or [c.get("name") for c in page.get("channels") or []]
            names.extend(n for n in batch if n)
            offset += len(batch)
            if not batch or offset >= int(page.get("total", offset)):
                break
        return sorted(n for n in set(names) if name_matches(pattern, n))
