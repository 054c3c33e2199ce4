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


async def test_one_server_by_two_names_is_one_entry() -> None:
    pool = ServerPool.from_urls(["localhost:4222", "127.0.0.1:4222", "[::1]:4222",
                                 "127.0.0.1:5222", "10.0.0.1:4222", "10.0.0.2:4222"],
                                randomize=False)
    await pool.resolve(2.0)
    assert [s.key for s in pool.servers] == [
        "localhost:4222", "127.0.0.1:5222", "10.0.0.1:4222", "10.0.0.2:4222"]
    # A discovered address of a server already listed by name is not a new entry.
    assert pool.add_discovered(["127.0.0.1:4222", "[::ffff:127.0.0.1]:5222"], "nats", None) == []
    assert len(pool.servers) == 4


def test_lost_server_is_tried_after_the_others() -> None:
    pool = ServerPool.from_urls(["a:1", "b:2", "c:3"], randomize=False)
    a, b, c = pool.servers
    pool.lost = a
    assert pool.candidates() == [b, c, a]
    b.failed = 1
    assert pool.candidates() == [c, a, b]


def test_back_off_is_per_server() -> None:
    pool = ServerPool.from_urls(["a:1", "b:2"], randomize=False)
    a, b = pool.servers
    assert pool.next_attempt(100.0) == (a, 0.0)
    pool.failed(a, 100.0, lambda attempt: 5.0 * (attempt - 1))
    assert a.retry_at == 105.0
    assert pool.next_attempt(100.0) == (b, 0.0)  # the other one first, without waiting
    pool.failed(b, 101.0, default_reconnect_delay)  # the seed's table: 2nd attempt at once
    assert pool.next_attempt(101.0) == (b, 0.0)
    pool.failed(b, 101.0, default_reconnect_delay)  # 3rd attempt after 2 ms
    assert pool.next_attempt(101.0) == (None, pytest.approx(0.002))
    assert pool.next_attempt(101.01) == (b, 0.0)
    pool.connected(b)
    assert (b.failed, b.retry_at) == (0, 0.0)
