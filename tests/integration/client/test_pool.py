"""The server pool and back-off (no sockets): URL forms, order, discovered servers, delays."""

from __future__ import annotations

import pytest

from tidings.client.pool import ServerPool, default_reconnect_delay, parse_url


def test_default_backoff_table() -> None:
    table = [default_reconnect_delay(n) for n in range(1, 12)]
    assert table == [0, 0, 0.002, 0.008, 0.032, 0.128, 0.512, 2.048, 4.0, 4.0, 4.0]


@pytest.mark.parametrize(("url", "expected"), [
    ("127.0.0.1", "nats://127.0.0.1:4222"),
    ("host:5000", "nats://host:5000"),
    ("tls://host", "tls://host:4222"),
    ("ws://host", "ws://host:80"),
    ("wss://host", "wss://host:443"),
    ("nats://u:p@host:1", "nats://u:p@host:1"),
])
def test_parse_url(url: str, expected: str) -> None:
    assert parse_url(url).geturl() == expected


def test_parse_url_rejects_unknown_scheme() -> None:
    with pytest.raises(ValueError):
        parse_url("http://host:80")


def test_kept_order_and_failures_sorted_last() -> None:
    pool = ServerPool.from_urls(["a:1", "b:2", "c:3"], randomize=False)
    assert [s.key for s in pool.candidates()] == ["a:1", "b:2", "c:3"]
    pool.servers[0].failed = 2
    pool.servers[1].failed = 1
    assert [s.key for s in pool.candidates()] == ["c:3", "b:2", "a:1"]


def test_shuffled_unless_asked() -> None:
    urls = [f"h{i}:1" for i in range(8)]
    orders = {tuple(s.key for s in ServerPool.from_urls(urls).candidates()) for _ in range(20)}
    assert len(orders) > 1


def test_discovered_servers_join_once() -> None:
    pool = ServerPool.from_urls(["127.0.0.1:4222"], randomize=False)
    added = pool.add_discovered(["127.0.0.1:4222", "127.0.0.1:5222", "bad url:x"], "nats", None)
    assert [s.key for s in added] == ["127.0.0.1:5222"]
    assert added[0].discovered
    assert pool.add_discovered(["127.0.0.1:5222"], "nats", None) == []
    assert len(pool.servers) == 2
