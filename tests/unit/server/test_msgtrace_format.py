"""The pieces of a trace event that the differential test cannot reach on this machine:
Go's time format in a zone other than UTC, and header parsing corners."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tidings.server.msgtrace import disable_trace, go_time, trace_headers

NS = 1_700_000_000_123_456_000  # 2023-11-14T22:13:20.123456Z


@pytest.fixture
def paris(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_go_time_utc() -> None:
    assert go_time(NS, utc=True) == "2023-11-14T22:13:20.123456Z"
    assert go_time(NS - 123_456_000, utc=True) == "2023-11-14T22:13:20Z"
    assert go_time(NS + 789, utc=True) == "2023-11-14T22:13:20.123456789Z"


def test_go_time_local_zone(paris: None) -> None:
    # Go writes time.Now() in the local zone with its offset, Z only for UTC itself.
    assert go_time(NS) == "2023-11-14T23:13:20.123456+01:00"
    assert go_time(NS, utc=True) == "2023-11-14T22:13:20.123456Z"


def test_trace_headers_corners() -> None:
    assert trace_headers(b"NATS/1.0 503\r\nNats-Trace-Dest: t\r\n\r\n") is None  # status line
    assert trace_headers(b"NATS/1.0\r\nNats-Trace-Dest: trace disabled\r\n\r\n") is None
    assert trace_headers(b"NATS/1.0\r\nNats-Trace-Dest:\r\n\r\n") is None  # empty value
    # A header line cut short (the rest has not arrived) is left out.
    assert trace_headers(b"NATS/1.0\r\nNats-Trace-Dest: t\r\nA: b") == {"Nats-Trace-Dest": ["t"]}
    # Names are kept as written, tabs around values trimmed, repeated names gathered.
    assert trace_headers(b"NATS/1.0\r\n X:\tv\t\r\nNats-Trace-Dest: t\r\n X: w\r\n\r\n") == {
        " X": ["v", "w"], "Nats-Trace-Dest": ["t"]}


def test_disable_trace_moves_the_destination_last() -> None:
    hdr = b"NATS/1.0\r\nNats-Trace-Dest: t\r\nA: b\r\n\r\n"
    assert disable_trace(hdr) == b"NATS/1.0\r\nA: b\r\nNats-Trace-Dest: trace disabled\r\n\r\n"
