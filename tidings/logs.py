"""Logging in nats-server's shape: `[pid] 2026/11/23 18:23:00.556619 [INF] message`.

Levels as its tags: [TRC] (protocol trace, -V), [DBG] (-D), [INF], [WRN], [ERR], [FTL]. `-T
false` drops the time; `-l FILE` writes to a file instead of stderr, started anew past
`--log_size_limit` bytes; colours are used only on a terminal, as the reference does.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import TextIO

TRACE = 5  # below DEBUG: the protocol trace of -V
logging.addLevelName(TRACE, "TRACE")

_TAGS = {TRACE: "TRC", logging.DEBUG: "DBG", logging.INFO: "INF", logging.WARNING: "WRN",
         logging.ERROR: "ERR", logging.CRITICAL: "FTL"}
_COLOURS = {"TRC": "\x1b[33m", "DBG": "\x1b[36m", "WRN": "\x1b[0;93m", "ERR": "\x1b[31m",
            "FTL": "\x1b[31m"}
_RESET = "\x1b[0m"


class ReferenceFormatter(logging.Formatter):
    """`[pid] date time.micro [TAG] message`, the time optional, the tag coloured on a tty."""

    def __init__(self, logtime: bool = True, colour: bool = False) -> None:
        super().__init__()
        self.prefix = f"[{os.getpid()}] "
        self.logtime = logtime
        self.colour = colour

    def format(self, record: logging.LogRecord) -> str:
        tag = _TAGS.get(record.levelno, record.levelname[:3])
        if self.colour and tag in _COLOURS:
            tag = f"{_COLOURS[tag]}{tag}{_RESET}"
        stamp = ""
        if self.logtime:
            seconds = int(record.created)
            micros = int((record.created - seconds) * 1_000_000)
            stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(seconds)) + f".{micros:06d} "
        text = f"{self.prefix}{stamp}[{tag}] {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class SizeLimitedFile(logging.StreamHandler):  # type: ignore[type-arg]
    """A log file that, past `limit` bytes, is renamed FILE.<date-time> and started anew,
    as the reference's logfile_size_limit does."""

    def __init__(self, path: str, limit: int) -> None:
        # Opened here so that a path that cannot be written is an error at start, not later.
        super().__init__(open(path, "a", buffering=1, encoding="utf-8"))  # noqa: SIM115
        self.path = path
        self.limit = limit

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        if self.limit > 0 and self.stream.tell() >= self.limit:
            self.stream.close()
            stamp = time.strftime("%Y.%m.%d.%H.%M.%S")
            os.replace(self.path, f"{self.path}.{stamp}.{time.time_ns() % 1_000_000_000:09d}")
            self.stream = open(self.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115


def setup(
    quiet: bool = False,
    debug: bool = False,
    trace: bool = False,
    logtime: bool = True,
    log_file: str = "",
    size_limit: int = 0,
) -> None:
    """Configure the root logger for a command: to `log_file` if given, else stderr."""
    level = logging.ERROR if quiet else TRACE if trace else logging.DEBUG if debug \
        else logging.INFO
    handler: logging.StreamHandler  # type: ignore[type-arg]
    if log_file:
        handler = SizeLimitedFile(log_file, size_limit)
        colour = False
    else:
        stream: TextIO = sys.stderr
        handler = logging.StreamHandler(stream)
        colour = stream.isatty()
    handler.setFormatter(ReferenceFormatter(logtime, colour=colour))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
