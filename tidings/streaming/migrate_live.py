"""Where `tidings streaming migrate` reads from while a streaming server runs.

Any NATS Streaming server with monitoring (tidings' or the reference's): the channels and
their subscriptions come from ``/streaming/channelsz?subs=1`` (paged), the messages from a
subscription of the streaming protocol (``tidings.streaming.client``) started at the first
sequence to copy, acknowledged a batch at a time once the batch is handed on.

Monitoring gives a durable's last sent sequence and how many messages it has not
acknowledged, not which: when there are some, the durable is resumed for a moment (with its
own client id, or as a member of its queue group, one message in flight, nothing
acknowledged) and the first message it is sent, the lowest unacknowledged (redeliveries come
in order), is its position; it is then closed, keeping its state. This is how stan2js reads
a position too. It needs the durable offline: the application stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Collection
from typing import Any

from google.protobuf.message import DecodeError

from .client import StanError, StreamingClient
from .client import connect as stan_connect
from .migrate_plan import Channel, MigrateError, SubState
from .pb import protocol_pb2 as pb
from .stores.base import MsgRecord

PAGE = 1024
MAX_INFLIGHT = 8192
ACK_WAIT = 60
IDLE = 10.0  # seconds without a message before a read gives up
PROBE_WAIT = 5.0


def fetch_json(url: str) -> Any:
    """GET a monitoring endpoint's JSON (blocking: call it in a thread)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise MigrateError(f"{url}: HTTP {exc.code} (is this a streaming server's "
                           "monitoring port?)") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise MigrateError(f"cannot read {url}: {reason}") from exc
    except ValueError as exc:
        raise MigrateError(f"{url}: the answer is not JSON") from exc


def _num(value: Any) -> int:
    """A count or sequence of monitoring's JSON (0 where it is not a number)."""
    return value if isinstance(value, int) and value > 0 else 0


def _is_channel(entry: Any) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("name"), str) and bool(entry["name"])


class LiveSource:
    """A running streaming server: ``--url`` (NATS), ``--monitor`` (its HTTP monitoring)."""

    def __init__(self, url: str, monitor: str, cluster_id: str = "",
                 client_id: str = "stan2js") -> None:
        self.url = url
        self.monitor = monitor.rstrip("/")
        self.cluster_id = cluster_id
        self.client_id = client_id
        self.description = f"streaming server {url}"
        self.sc: StreamingClient | None = None
        self._listed: list[dict[str, Any]] | None = None

    async def _channelsz(self) -> list[dict[str, Any]]:
        if self._listed is not None:
            return self._listed
        out: list[dict[str, Any]] = []
        while True:
            url = f"{self.monitor}/streaming/channelsz?subs=1&offset={len(out)}&limit={PAGE}"
            page = await asyncio.to_thread(fetch_json, url)
            if not isinstance(page, dict):
                raise MigrateError(f"{url}: not a channel list")
            self._check_cluster(str(page.get("cluster_id") or ""))
            chans = page.get("channels") or []
            if not isinstance(chans, list) or not all(_is_channel(c) for c in chans):
                raise MigrateError(f"{url}: not a channel list")
            out += chans
            if not chans or len(out) >= _num(page.get("total")):
                break
        self._listed = out
        return out

    def _check_cluster(self, listed: str) -> None:
        if not self.cluster_id:
            self.cluster_id = listed
        elif listed and listed != self.cluster_id:
            raise MigrateError(f"{self.monitor} monitors cluster {listed!r}, not "
                               f"{self.cluster_id!r}")

    async def _client(self) -> StreamingClient:
        if self.sc is None:
            self.sc = await self._connect(self.client_id)
        return self.sc

    async def _connect(self, client_id: str) -> StreamingClient:
        try:
            return await stan_connect(self.cluster_id, client_id, url=self.url,
                                      connect_timeout=5, max_reconnect_attempts=0)
        except (StanError, OSError) as exc:
            raise MigrateError(f"cannot connect to cluster {self.cluster_id!r} at {self.url} "
                               f"as {client_id!r}: {exc}") from exc
        except Exception as exc:  # the NATS client's own errors
            raise MigrateError(f"cannot connect to {self.url}: {exc}") from exc

    async def channels(self) -> list[Channel]:
        return [Channel(c["name"], _num(c.get("first_seq")), _num(c.get("last_seq")),
                        _num(c.get("msgs"))) for c in await self._channelsz()]

    async def subscriptions(self, channels: Collection[str]) -> list[SubState]:
        out = []
        for c in await self._channelsz():
            if c["name"] not in channels:
                continue
            for s in c.get("subscriptions") or []:
                if isinstance(s, dict) and s.get("is_durable"):
                    out.append(await self._state(c["name"], s))
        return out

    async def _state(self, channel: str, s: dict[str, Any]) -> SubState:
        durable, queue = str(s.get("durable_name") or ""), str(s.get("queue_name") or "")
        client_id = str(s.get("client_id") or "")
        last_sent = _num(s.get("last_sent"))
        first: int | None = None
        if _num(s.get("pending_count")):
            who = f"queue group {queue!r}" if queue else f"durable {durable!r}"
            if not s.get("is_offline"):
                raise MigrateError(
                    f"channel {channel!r}: {who} of client {client_id!r} is online "
                    "with unacknowledged messages: stop the application before migrating "
                    "(its position can only be read while it is offline)")
            first = await self._probe(channel, client_id, durable, queue,
                                      _num(s.get("ack_wait")) or 30)
        return SubState(channel, client_id, durable, queue, last_sent, first)

    async def _probe(self, channel: str, client_id: str, durable: str, queue: str,
                     ack_wait: int) -> int | None:
        """The first message an offline durable is sent when it resumes: its lowest
        unacknowledged one (None if it is sent nothing in time)."""
        if queue:
            sc, own = await self._client(), False
            durable, _, queue = queue.partition(":")
        else:
            sc, own = await self._connect(client_id), True
        first: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_msg(subject: bytes, reply: bytes | None, hdr: bytes | None,
                   payload: bytes) -> None:
            try:
                seq = pb.MsgProto.FromString(payload).sequence
            except DecodeError:
                return
            if not first.done():
                first.set_result(seq)

        try:
            sub = await sc.subscribe(channel, queue=queue, durable_name=durable,
                                     max_inflight=1, ack_wait=max(ack_wait, 1), raw_cb=on_msg)
            try:
                return await asyncio.wait_for(first, PROBE_WAIT)
            except asyncio.TimeoutError:
                return None
            finally:
                await sub.close()
        except StanError as exc:
            raise MigrateError(f"channel {channel!r}: reading the position of durable "
                               f"{durable!r}: {exc}") from exc
        finally:
            if own:
                with contextlib.suppress(StanError):
                    await sc.close()

    async def read(self, channel: Channel, start: int) -> AsyncIterator[list[MsgRecord]]:
        sc = await self._client()
        got: list[MsgRecord] = []
        arrived = asyncio.Event()

        def on_msg(subject: bytes, reply: bytes | None, hdr: bytes | None,
                   payload: bytes) -> None:
            try:
                m = pb.MsgProto.FromString(payload)
            except DecodeError:
                return
            got.append(MsgRecord(m.sequence, m.timestamp, m.subject, m.reply, m.data))
            arrived.set()

        try:
            sub = await sc.subscribe(channel.name, sequence=start, max_inflight=MAX_INFLIGHT,
                                     ack_wait=ACK_WAIT, raw_cb=on_msg)
        except StanError as exc:
            raise MigrateError(f"channel {channel.name!r}: subscribe: {exc}") from exc
        last = start - 1
        try:
            while True:
                if not got:
                    arrived.clear()
                    try:
                        await asyncio.wait_for(arrived.wait(), IDLE)
                    except asyncio.TimeoutError:
                        raise MigrateError(
                            f"channel {channel.name!r}: nothing delivered for {IDLE:g} s "
                            f"(waiting for the messages after {last} up to "
                            f"{channel.last_seq})") from None
                batch = got[:]
                del got[:]
                last = batch[-1].seq
                yield batch
                try:
                    await sub.ack_sequences(m.seq for m in batch)
                except StanError as exc:
                    raise MigrateError(f"channel {channel.name!r}: {exc}") from exc
                if batch[-1].seq >= channel.last_seq:
                    return
        finally:
            if not sc.closed:
                with contextlib.suppress(StanError):
                    await sub.unsubscribe()

    async def close(self) -> None:
        if self.sc is not None:
            with contextlib.suppress(StanError):
                await self.sc.close()
            self.sc = None
