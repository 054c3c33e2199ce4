"""The JetStream side of `tidings streaming migrate`, on tidings' own client.

Only the JetStream API every server has (`$JS.API.INFO`, `STREAM.INFO` / `CREATE` /
`MSG.GET` / `MSG.DELETE`, `CONSUMER.INFO` / `CREATE`) and publishes whose PubAcks come back
to an inbox: tidings with -js and nats-server with -js alike. :class:`AckWindow` is the
bookkeeping of the publishes awaiting their PubAck (sans-IO); :class:`Publisher` keeps at
most a window of them outstanding.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Mapping
from typing import Any

from ..client import Client
from ..client import connect as nats_connect
from ..client import errors as nerr
from ..protocol.headers import EncodedHeaders, HeaderError, Headers
from .migrate_plan import MigrateError

API = "$JS.API"
NOT_FOUND = (10059, 10037, 10014)  # stream, message, consumer not found
API_TIMEOUT = 5.0


class JetStreamTarget:
    """The JetStream server the streams go to."""

    def __init__(self, nc: Client, url: str) -> None:
        self.nc = nc
        self.url = url

    @classmethod
    async def connect(cls, url: str) -> JetStreamTarget:
        try:
            nc = await nats_connect(url, max_reconnect_attempts=0, connect_timeout=5)
        except (nerr.Error, OSError) as exc:
            raise MigrateError(f"cannot connect to the target {url}: {exc}") from exc
        target = cls(nc, url)
        try:
            await target.request("INFO", None)
        except BaseException:
            await nc.close()
            raise
        return target

    async def close(self) -> None:
        await self.nc.close()

    async def request(self, op: str, body: Mapping[str, Any] | None,
                      missing_ok: bool = False) -> dict[str, Any] | None:
        """One API call; None for "not found" when ``missing_ok``, MigrateError for an error
        answer, no answer, or a server without JetStream."""
        payload = json.dumps(body).encode() if body is not None else b""
        try:
            msg = await self.nc.request(f"{API}.{op}", payload, timeout=API_TIMEOUT)
        except nerr.NoRespondersError as exc:
            raise MigrateError(f"the target {self.url} has no JetStream (nobody answers "
                               f"{API}.INFO: start it with -js)") from exc
        except nerr.TimeoutError as exc:
            raise MigrateError(f"the target {self.url} did not answer {API}.{op} in "
                               f"{API_TIMEOUT:g} s") from exc
        except nerr.Error as exc:
            raise MigrateError(f"the target {self.url}: {exc}") from exc
        try:
            answer = json.loads(msg.data)
        except ValueError as exc:
            raise MigrateError(f"the target's answer to {API}.{op} is not JSON") from exc
        if not isinstance(answer, dict):
            raise MigrateError(f"the target's answer to {API}.{op} is not a JSON object")
        err = answer.get("error")
        if err:
            if not isinstance(err, dict):
                err = {"description": str(err)}
            if missing_ok and err.get("err_code") in NOT_FOUND:
                return None
            raise MigrateError(f"the target refused {API}.{op}: {api_error(err)}")
        return answer

    async def stream_info(self, name: str) -> dict[str, Any] | None:
        return await self.request(f"STREAM.INFO.{name}", None, missing_ok=True)

    async def create_stream(self, config: Mapping[str, Any]) -> None:
        await self.request(f"STREAM.CREATE.{config['name']}", config)

    async def get_headers(self, stream: str, seq: int) -> Headers | None:
        """The headers of a stored message (empty when it has none); None if not stored."""
        answer = await self.request(f"STREAM.MSG.GET.{stream}", {"seq": seq}, missing_ok=True)
        if answer is None:
            return None
        message = answer.get("message")
        raw = message.get("hdrs") if isinstance(message, dict) else None
        if not raw or not isinstance(raw, str):
            return Headers()
        try:
            return Headers.decode(base64.b64decode(raw))
        except (ValueError, HeaderError):
            return Headers()

    async def delete_msg(self, stream: str, seq: int) -> None:
        await self.request(f"STREAM.MSG.DELETE.{stream}", {"seq": seq, "no_erase": True})

    async def consumer_info(self, stream: str, name: str) -> dict[str, Any] | None:
        return await self.request(f"CONSUMER.INFO.{stream}.{name}", None, missing_ok=True)

    async def create_consumer(self, stream: str, config: Mapping[str, Any]) -> None:
        await self.request(f"CONSUMER.CREATE.{stream}.{config['name']}",
                           {"stream_name": stream, "config": config})


def api_error(err: Mapping[str, Any]) -> str:
    return f"{err.get('description', 'error')} (err_code {err.get('err_code', '?')})"


class AckWindow:
    """The publishes of one channel awaiting their PubAck, by channel sequence. An ack must
    say the message was stored at its own sequence; the first that does not is ``error``."""

    def __init__(self, stream: str, channel: str) -> None:
        self.stream = stream
        self.channel = channel
        self.waiting: set[int] = set()
        self.error: str | None = None
        self.acked = 0
        # the usual answer, read without JSON: {"stream":"S","seq":N}
        self._plain = b'{"stream":%s,"seq":' % json.dumps(stream).encode()

    def sent(self, seq: int) -> None:
        self.waiting.add(seq)

    def ack(self, seq: int, payload: bytes, status: int | None) -> None:
        if seq not in self.waiting:
            return
        self.waiting.discard(seq)
        if self.error is not None:
            return
        plain = self._plain
        if payload.startswith(plain) and payload[len(plain):-1] == b"%d" % seq and (
                payload[-1:] == b"}" and status is None):
            self.acked += 1
            return
        what = f"channel {self.channel!r} message {seq}"
        if status == 503:
            self.error = (f"no stream of the target takes subject {self.channel!r} (no "
                          f"responders for {what})")
            return
        if status is not None:
            self.error = f"stream {self.stream!r} did not take {what} (status {status})"
            return
        try:
            answer = json.loads(payload)
        except ValueError:
            self.error = f"stream {self.stream!r} answered {what} with {payload[:80]!r}"
            return
        if not isinstance(answer, dict):
            self.error = f"stream {self.stream!r} answered {what} with {payload[:80]!r}"
        elif answer.get("error"):
            self.error = f"stream {self.stream!r} refused {what}: {api_error(answer['error'])}"
        elif answer.get("seq") != seq:
            self.error = (f"stream {self.stream!r} stored {what} as its message "
                          f"{answer.get('seq')}: the sequences no longer match (does the "
                          f"server ignore first_seq, or does someone else publish to "
                          f"{self.channel!r}?)")
        else:
            self.acked += 1


class Publisher:
    """Publishes a channel's messages to its stream, at most ``window`` PubAcks outstanding;
    ``publish`` and ``drain`` raise MigrateError with the first refusal, or when no PubAck
    comes for ``timeout`` seconds."""

    def __init__(self, nc: Client, stream: str, channel: str, window: int = 4096,
                 timeout: float = 30.0) -> None:
        self.nc = nc
        self.acks = AckWindow(stream, channel)
        self.window = max(1, window)
        self.timeout = timeout
        self._prefix = ""
        self._sub: Any = None
        self._moved = asyncio.Event()

    async def start(self) -> None:
        self._prefix = self.nc.new_inbox() + "."
        self._sub = await self.nc.subscribe(self._prefix + "*", raw_cb=self._on_ack)

    def _on_ack(self, subject: bytes, reply: bytes | None, hdr: bytes | None,
                payload: bytes) -> None:
        try:
            seq = int(subject[len(self._prefix):])
        except ValueError:
            return
        status = _status(hdr) if hdr else None
        self.acks.ack(seq, payload, status)
        if len(self.acks.waiting) < self.window or self.acks.error:
            self._moved.set()

    async def publish(self, subject: str, data: bytes, headers: bytes, seq: int) -> None:
        """Publish channel message ``seq`` with its header block (waits while the window is
        full; raises the first refusal)."""
        if len(self.acks.waiting) >= self.window:
            await self._wait(lambda: len(self.acks.waiting) < self.window)
        self._raise()
        self.acks.sent(seq)
        try:
            await self.nc.publish(subject, data, reply=f"{self._prefix}{seq}",
                                  headers=EncodedHeaders(headers))
        except nerr.Error as exc:
            raise MigrateError(f"publishing to the target: {exc}") from exc

    async def drain(self) -> None:
        """Until every publish so far is acknowledged."""
        if self.acks.waiting:
            await self._wait(lambda: not self.acks.waiting)
        self._raise()

    async def close(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(nerr.Error):
                await self._sub.unsubscribe()
            self._sub = None

    async def _wait(self, ready: Any) -> None:
        while not ready() and self.acks.error is None:
            self._moved.clear()
            try:
                await asyncio.wait_for(self._moved.wait(), self.timeout)
            except asyncio.TimeoutError:
                raise MigrateError(
                    f"no PubAck from stream {self.acks.stream!r} for {self.timeout:g} s "
                    f"({len(self.acks.waiting)} outstanding)") from None

    def _raise(self) -> None:
        if self.acks.error is not None:
            raise MigrateError(self.acks.error)


def _status(hdr: bytes) -> int | None:
    line = hdr.split(b"\r\n", 1)[0].split()
    if len(line) > 1 and line[1].isdigit():
        return int(line[1])
    return None
