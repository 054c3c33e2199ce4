"""The connector's glue on JetStream's API (any JetStream server: tidings or nats-server, no
tidings extension): requests with their errors, a stream's bounds, names by pattern, the
first sequence at or after a time, and the times JetStream writes.

`$JS.API.STREAM.INFO` gives a stream's first and last sequence, its messages and bytes (an
estimate of one message's size for planning), its retention and whether it allows direct
gets (which decides how a range is read: jsread.py). `$JS.API.STREAM.NAMES` pages through the
names; `$JS.API.DIRECT.GET` (or `STREAM.MSG.GET` where direct gets are off) with
`start_time` finds the first message at or after a time.
"""

from __future__ import annotations

import base64
import calendar
import json
from typing import Any, NamedTuple

from ..client import Client
from ..client import errors as nats_errors
from ..server.gojson import go_time, parse_go_time
from .connection import ConnectorError
from .planning import name_matches

API = "$JS.API"
NAMES_PAGE = 256  # the reference's JSApiNamesLimit: names a STREAM.NAMES page holds at most


class StreamBounds(NamedTuple):
    """What planning needs of a stream."""

    first: int
    last: int
    msg_size: int  # bytes of one message, on average
    direct: bool  # allow_direct: ranges are read with direct gets
    retention: str  # limits, interest or workqueue
    messages: int
    created: str = ""  # when the stream was created (one deleted and made again differs)


class JetStreamError(ConnectorError):
    """A JetStream API request refused (its description and codes) or unanswered."""

    def __init__(self, message: str, code: int = 0, err_code: int = 0) -> None:
        super().__init__(message)
        self.code, self.err_code = code, err_code


STREAM_NOT_FOUND = 10059


async def api(nc: Client, subject: str, body: dict[str, Any] | None = None,
              timeout: float = 10.0) -> dict[str, Any]:
    """One `$JS.API.<subject>` request's answer; JetStreamError for an error answer, for no
    answer (no JetStream there) and for a timeout."""
    payload = json.dumps(body).encode() if body is not None else b""
    try:
        reply = await nc.request(f"{API}.{subject}", payload, timeout=timeout)
    except nats_errors.NoRespondersError:
        raise JetStreamError(f"no JetStream answers {API}.{subject} (is JetStream enabled "
                             "on the server and in the account?)") from None
    except nats_errors.TimeoutError:
        raise JetStreamError(f"JetStream did not answer {API}.{subject} within "
                             f"{timeout:g} s (requestTimeout)") from None
    try:
        answer = json.loads(reply.data)
    except ValueError:
        raise JetStreamError(f"{API}.{subject}: not a JetStream answer") from None
    error = answer.get("error") if isinstance(answer, dict) else None
    if error:
        raise JetStreamError(f"{API}.{subject}: {error.get('description')} "
                             f"(code {error.get('code')}, err_code {error.get('err_code')})",
                             int(error.get("code") or 0), int(error.get("err_code") or 0))
    return answer


async def bounds(nc: Client, stream: str, timeout: float) -> StreamBounds:
    """A stream's bounds (`first` past `last` when it holds no message); JetStreamError
    when there is no such stream."""
    try:
        info = await api(nc, f"STREAM.INFO.{stream}", None, timeout)
    except JetStreamError as exc:
        if exc.err_code == STREAM_NOT_FOUND:
            raise JetStreamError(f"stream {stream!r} not found", exc.code,
                                 exc.err_code) from None
        raise
    state, config = info.get("state") or {}, info.get("config") or {}
    msgs = int(state.get("messages") or 0)
    size = int(state.get("bytes") or 0) // msgs if msgs else 0
    last = int(state.get("last_seq") or 0)
    first = int(state.get("first_seq") or 0) if msgs else last + 1
    return StreamBounds(first, last, size, bool(config.get("allow_direct")),
                        str(config.get("retention")), msgs, str(info.get("created") or ""))


async def names(nc: Client, pattern: str, timeout: float) -> list[str]:
    """The names of the streams `pattern` matches (planning.name_matches: `*` or `>` every
    one, `ORDERS_*` as a glob)."""
    out: list[str] = []
    offset = 0
    while True:
        page = await api(nc, "STREAM.NAMES", {"offset": offset}, timeout)
        batch = page.get("streams") or []
        out.extend(batch)
        offset += len(batch)
        if not batch or offset >= int(page.get("total") or 0):
            break
    return sorted(name for name in set(out) if name_matches(pattern, name))


async def first_at_or_after(nc: Client, stream: str, time_ns: int, direct: bool,
                            timeout: float) -> int | None:
    """The sequence of the first message stored at or after `time_ns`, None if none."""
    body = {"start_time": go_time(time_ns, utc=True)}
    try:
        if direct:
            reply = await nc.request(f"{API}.DIRECT.GET.{stream}", json.dumps(body).encode(),
                                     timeout=timeout)
            headers = reply.headers or {}
            if headers.get("Status"):
                return None  # (404: no message at or after it)
            return int(headers["Nats-Sequence"])
        answer = await api(nc, f"STREAM.MSG.GET.{stream}", body, timeout)
    except JetStreamError as exc:
        if exc.code == 404:
            return None
        raise
    except nats_errors.TimeoutError:
        raise JetStreamError(f"no answer from stream {stream!r} within {timeout:g} s") from None
    return int(answer["message"]["seq"])


_SCALE = (0, *(10 ** (9 - n) for n in range(1, 10)))  # a fraction of n digits, in ns
_SECONDS: dict[bytes, int] = {}  # "2026-11-26T17:27:25" -> Unix seconds (times share them)


def parse_time(text: bytes) -> int:
    """An RFC 3339 time as JetStream writes it (`...T17:27:25.793125753Z`, UTC, the fraction
    without trailing zeros) in Unix nanoseconds."""
    if text[-1:] != b"Z" or len(text) < 20:  # (not how JetStream writes it: the long way)
        return _parsed_slowly(text)
    head = text[:19]
    secs = _SECONDS.get(head)
    if secs is None:
        try:
            secs = calendar.timegm((int(head[:4]), int(head[5:7]), int(head[8:10]),
                                    int(head[11:13]), int(head[14:16]), int(head[17:19])))
        except ValueError:
            return _parsed_slowly(text)
        if len(_SECONDS) > 100_000:
            _SECONDS.clear()
        _SECONDS[head] = secs
    frac = text[20:-1]
    if text[19:20] == b"." and 0 < len(frac) <= 9 and frac.isdigit():
        return secs * 1_000_000_000 + int(frac) * _SCALE[len(frac)]
    if len(text) == 20:
        return secs * 1_000_000_000
    return _parsed_slowly(text)


def _parsed_slowly(text: bytes) -> int:
    ns = parse_go_time(text.decode(errors="replace"))
    if not ns:
        raise JetStreamError(f"not a time as JetStream writes it: {text!r}")
    return ns


def message_of_get(answer: dict[str, Any]) -> tuple[str, int, bytes | None, bytes, int]:
    """(subject, sequence, headers block, data, time ns) of a STREAM.MSG.GET answer."""
    msg = answer["message"]
    hdrs = msg.get("hdrs")
    return (msg["subject"], int(msg["seq"]), base64.b64decode(hdrs) if hdrs else None,
            base64.b64decode(msg.get("data") or ""), parse_time(msg["time"].encode()))
