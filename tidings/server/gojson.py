"""Times and JSON as Go's encoding/json writes them, for what the server sends in the
reference's JSON (trace events, the system account's events, JetStream's answers)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

_UTC_SECONDS: dict[int, str] = {}  # Unix seconds -> "YYYY-MM-DDTHH:MM:SS" (UTC)


def go_time(ns: int, utc: bool = False) -> str:
    """A time as Go's encoding/json writes a time.Time: RFC 3339 with nanoseconds, trailing
    zeros dropped, and Z for a zero UTC offset (local time unless `utc`)."""
    secs, frac = divmod(ns, 1_000_000_000)
    if utc:  # (the common case, on every direct get and stored message: its second cached)
        text = _UTC_SECONDS.get(secs)
        if text is None:
            text = datetime.fromtimestamp(secs, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
            if len(_UTC_SECONDS) >= 4096:
                _UTC_SECONDS.clear()
            _UTC_SECONDS[secs] = text
        return f"{text}.{frac:09d}".rstrip("0") + "Z" if frac else text + "Z"
    moment = datetime.fromtimestamp(secs, timezone.utc).astimezone()
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        text += f".{frac:09d}".rstrip("0")
    offset = moment.utcoffset()
    if not offset:
        return text + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    return text + f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def go_json(obj: Any) -> bytes:
    """JSON as Go's encoding/json writes it: compact, UTF-8, with <, >, &, U+2028 and U+2029
    escaped."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    for char, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                      ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, esc)
    return text.encode()


def parse_go_time(text: str) -> int:
    """An RFC 3339 time (nanoseconds kept) as nanoseconds since the epoch; 0 if unreadable."""
    if not text:
        return 0
    frac = 0
    main = text
    if "." in text:
        main, rest = text.split(".", 1)
        digits = "".join(c for c in rest if c.isdigit())
        zone = rest[len(digits):]
        frac = int((digits + "000000000")[:9])
        main += zone
    try:
        moment = datetime.fromisoformat(main.replace("Z", "+00:00"))
    except ValueError:
        return 0
    return int(moment.timestamp()) * 1_000_000_000 + frac
