"""Accounts on one server, the same configuration file run by tidings and by the reference
nats-server, the same nats-py clients asserting the same outcomes: isolation both ways,
stream exports and imports (prefix, `to`, public and restricted), service exports and
imports (request and reply across accounts, a Singleton's single response, no responders),
users, NKeys and no_auth_user bound to accounts, and an account's connection limit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import nats
import nkeys
import pytest
from nats.aio.client import Client

from tests.harness import Server, start_configured
from tests.messaging import synced

KINDS = ["tidings", "reference"]

SEED = nkeys.encode_seed(bytes(range(1, 33)), nkeys.PREFIX_BYTE_USER)
NKEY = nkeys.from_seed(SEED).public_key.decode()

CONF = f"""
accounts {{
  A: {{
    users: [{{user: a, password: a}}, {{user: a2, password: a2}}]
    exports: [
      {{stream: "public.>"}}
      {{stream: "private.>", accounts: [B]}}
      {{service: "svc.echo"}}
      {{service: "svc.stream", response_type: stream, response_threshold: "2s"}}
      {{service: "svc.nobody"}}
    ]
  }}
  B: {{
    users: [{{user: b, password: b}}, {{nkey: {NKEY}}}]
    imports: [
      {{stream: {{account: A, subject: "public.>"}}, prefix: "fromA"}}
      {{stream: {{account: A, subject: "private.>"}}}}
      {{service: {{account: A, subject: "svc.echo"}}, to: "echo"}}
      {{service: {{account: A, subject: "svc.stream"}}}}
      {{service: {{account: A, subject: "svc.nobody"}}}}
    ]
  }}
  C: {{
    users: [{{user: c, password: c}}]
    imports: [
      {{stream: {{account: A, subject: "public.>"}}, to: "other.>"}}
    ]
    limits: {{max_connections: 1}}
  }}
}}
no_auth_user: b
"""


@pytest.fixture(scope="module", params=KINDS)
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    srv = start_configured(request.param, CONF)
    yield srv
    srv.stop()


@pytest.fixture
async def clients(server: Server) -> AsyncIterator[dict[str, Client]]:
    host = server.url.removeprefix("nats://")
    made: dict[str, Client] = {}
    for user in ("a", "b", "c"):
        made[user] = await nats.connect(f"nats://{user}:{user}@{host}",
                                        allow_reconnect=False)
    yield made
    for nc in made.values():
        await nc.close()


async def received(sub: nats.aio.subscription.Subscription, timeout: float = 2.0) -> list[
        tuple[str, bytes]]:
    """What `sub` got until a short quiet spell (after the senders' flushes)."""
    got: list[tuple[str, bytes]] = []
    while True:
        try:
            msg = await sub.next_msg(timeout=timeout)
        except nats.errors.TimeoutError:
            return got
        got.append((msg.subject, msg.data))
        timeout = 0.3


async def test_accounts_are_isolated_both_ways(clients: dict[str, Client]) -> None:
    a, b = clients["a"], clients["b"]
    sub_a = await a.subscribe("news")
    sub_b = await b.subscribe("news")
    await synced(a)
    await synced(b)
    await a.publish("news", b"from a")
    await b.publish("news", b"from b")
    await a.flush()
    await b.flush()
    assert await received(sub_a) == [("news", b"from a")]
    assert await received(sub_b) == [("news", b"from b")]


async def test_a_stream_import_with_a_prefix_and_with_to(clients: dict[str, Client]) -> None:
    a, b, c = clients["a"], clients["b"], clients["c"]
    in_b = await b.subscribe("fromA.public.>")
    in_c = await c.subscribe("other.>")
    plain_b = await b.subscribe("public.>")  # B's own subject of that name: not A's
    await synced(b)
    await synced(c)
    await a.publish("public.x.y", b"1")
    await a.flush()
    assert await received(in_b) == [("fromA.public.x.y", b"1")]
    assert await received(in_c) == [("other.x.y", b"1")]
    assert await received(plain_b, 0.5) == []


async def test_a_restricted_stream_export_reaches_only_the_named_account(
        clients: dict[str, Client]) -> None:
    a, b, c = clients["a"], clients["b"], clients["c"]
    in_b = await b.subscribe("private.>")
    in_c = await c.subscribe("private.>")
    await synced(b)
    await synced(c)
    await a.publish("private.z", b"secret")
    await a.flush()
    assert await received(in_b) == [("private.z", b"secret")]
    assert await received(in_c, 0.5) == []


async def test_nothing_flows_back_through_a_stream_import(clients: dict[str, Client]) -> None:
    a, b = clients["a"], clients["b"]
    in_a = await a.subscribe("public.>")
    await synced(a)
    await b.publish("public.x", b"from b")
    await b.publish("fromA.public.x", b"from b")
    await b.flush()
    assert await received(in_a, 0.5) == []


async def test_a_service_import_carries_requests_and_replies(clients: dict[str, Client]) -> None:
    a, b = clients["a"], clients["b"]

    async def echo(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(b"echo:" + msg.data + b" on " + msg.subject.encode())

    await a.subscribe("svc.echo", cb=echo)
    await synced(a)
    reply = await b.request("echo", b"hi", timeout=5)
    assert reply.data == b"echo:hi on svc.echo"
    # B has no such subject of its own: the service is only there through its import.
    with pytest.raises(nats.errors.NoRespondersError):
        await b.request("svc.echo", b"hi", timeout=2)


async def test_a_request_through_an_import_names_the_requesters_account(
        clients: dict[str, Client]) -> None:
    import json

    a, b = clients["a"], clients["b"]
    seen: list[dict[str, object]] = []

    async def note(msg: nats.aio.msg.Msg) -> None:
        seen.append(json.loads((msg.headers or {})["Nats-Request-Info"]))
        await msg.respond(b"ok")

    await a.subscribe("svc.echo", cb=note)
    await synced(a)
    await b.request("echo", b"?", timeout=5)
    assert len(seen) == 1 and seen[0]["acc"] == "B", seen
    assert set(seen[0]) <= {"acc", "rtt"}, seen


async def test_a_singleton_service_answers_once(clients: dict[str, Client]) -> None:
    a, b = clients["a"], clients["b"]

    async def twice(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(b"one")
        await msg.respond(b"two")

    await a.subscribe("svc.echo", cb=twice)
    await synced(a)
    inbox = b.new_inbox()
    replies = await b.subscribe(inbox)
    await synced(b)
    await b.publish("echo", b"?", reply=inbox)
    await b.flush()
    assert [data for _, data in await received(replies)] == [b"one"]


async def test_a_streamed_service_answers_many_times(clients: dict[str, Client]) -> None:
    a, b = clients["a"], clients["b"]

    async def three(msg: nats.aio.msg.Msg) -> None:
        for i in range(3):
            await msg.respond(b"%d" % i)

    await a.subscribe("svc.stream", cb=three)
    await synced(a)
    inbox = b.new_inbox()
    replies = await b.subscribe(inbox)
    await synced(b)
    await b.publish("svc.stream", b"?", reply=inbox)
    await b.flush()
    assert [data for _, data in await received(replies)] == [b"0", b"1", b"2"]


async def test_a_service_with_nobody_behind_it_has_no_responders(
        clients: dict[str, Client]) -> None:
    with pytest.raises(nats.errors.NoRespondersError):
        await clients["b"].request("svc.nobody", b"?", timeout=2)


async def test_no_auth_user_and_nkey_users_are_in_their_account(server: Server) -> None:
    a = await nats.connect(server.url.replace("nats://", "nats://a:a@"))
    anonymous = await nats.connect(server.url)  # no_auth_user b: account B
    signer = nkeys.from_seed(SEED)
    with_nkey = await nats.connect(server.url, nkeys_seed_str=SEED.decode())
    try:
        assert signer.public_key.decode() == NKEY
        in_b = await anonymous.subscribe("fromA.public.>")
        in_b2 = await with_nkey.subscribe("fromA.public.>")
        await synced(anonymous)
        await synced(with_nkey)
        await a.publish("public.n", b"x")
        await a.flush()
        assert await received(in_b) == [("fromA.public.n", b"x")]
        assert await received(in_b2) == [("fromA.public.n", b"x")]
    finally:
        for nc in (a, anonymous, with_nkey):
            await nc.close()


async def test_an_account_connection_limit(server: Server, clients: dict[str, Client]) -> None:
    host = server.url.removeprefix("nats://")
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    with pytest.raises(Exception):  # noqa: B017  (the client's error type varies)
        await nats.connect(f"nats://c:c@{host}", allow_reconnect=False,
                           error_cb=on_error, connect_timeout=2, max_reconnect_attempts=0)
    assert any("maximum account active connections exceeded" in str(e).lower()
               for e in errors), errors
    # The account's first client is still there, and others' accounts are not limited.
    assert clients["c"].is_connected
    other = await nats.connect(f"nats://a2:a2@{host}")
    await other.close()


RELOAD_BEFORE = """
accounts {
  A: { users: [{user: a, password: a}], exports: [{stream: "s.>"}] }
  B: { users: [{user: b, password: b}, {user: mover, password: m}] }
}
"""
RELOAD_AFTER = """
accounts {
  A: { users: [{user: a, password: a}, {user: mover, password: m}], exports: [{stream: "s.>"}] }
  B: {
    users: [{user: b, password: b}]
    imports: [{stream: {account: A, subject: "s.>"}, prefix: "a"}]
  }
  C: { users: [{user: c, password: c}] }
}
"""


@pytest.mark.parametrize("kind", KINDS)
async def test_a_reload_adds_and_changes_accounts_and_moves_users(kind: str) -> None:
    """Accounts added, an import added, a user moved to another account: the clients whose
    account did not change stay (with what their account now imports), the moved one is
    closed, a user of the new account logs in."""
    import re
    import signal
    from pathlib import Path

    server = start_configured(kind, RELOAD_BEFORE)
    host = server.url.removeprefix("nats://")
    closed = asyncio.Event()

    async def on_closed() -> None:
        closed.set()

    try:
        b = await nats.connect(f"nats://b:b@{host}", allow_reconnect=False)
        mover = await nats.connect(f"nats://mover:m@{host}", allow_reconnect=False,
                                   closed_cb=on_closed)
        a = await nats.connect(f"nats://a:a@{host}", allow_reconnect=False)
        sub = await b.subscribe("a.s.>")
        await synced(b)
        Path(server.config_path).write_text(
            Path(server.config_path).read_text().replace(RELOAD_BEFORE, RELOAD_AFTER))
        since = server.process_log.mark()
        assert server.proc is not None
        server.proc.send_signal(signal.SIGHUP)
        await asyncio.to_thread(server.process_log.wait_for,
                                re.escape("Reloaded server configuration"), 10, since)
        await asyncio.wait_for(closed.wait(), 10)  # the user now in A was in B
        assert mover.is_closed
        await a.publish("s.x", b"after reload")
        await a.flush()
        msg = await sub.next_msg(timeout=5)
        assert (msg.subject, msg.data) == ("a.s.x", b"after reload")
        c = await nats.connect(f"nats://c:c@{host}", allow_reconnect=False)
        await c.close()
        assert b.is_connected and a.is_connected
        await a.close()
        await b.close()
    finally:
        server.stop()


LIMITS = """
accounts {
  L: {
    users: [{user: l, password: l}]
    limits: {max_subscriptions: 2, max_payload: 100}
  }
}
"""


@pytest.mark.parametrize("kind", KINDS)
async def test_an_accounts_subscription_and_payload_limits(kind: str) -> None:
    from tests.harness.rawnats import CONNECT_PLAIN, RawConn

    server = start_configured(kind, LIMITS)
    try:
        with RawConn(server.port) as conn:
            connect = CONNECT_PLAIN.replace(b"{", b'{"user":"l","pass":"l",', 1)
            conn.send(connect + b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\n")
            assert conn.barrier() == b"-ERR 'maximum subscriptions exceeded'\r\n"
            conn.send(b"PUB a 200\r\n" + b"x" * 200 + b"\r\n")
            assert conn.read_to_eof() == b"-ERR 'Maximum Payload Violation'\r\n"
    finally:
        server.stop()


LATENCY = """
accounts {
  S: {
    users: [{user: s, password: s}]
    exports: [
      {service: "measured", latency: {sampling: 100, subject: "latency.measured"}}
      {service: "shared"}
    ]
  }
  R: {
    users: [{user: r, password: r}]
    imports: [
      {service: {account: S, subject: "measured"}}
      {service: {account: S, subject: "shared"}, share: true}
    ]
  }
}
"""


@pytest.mark.parametrize("kind", KINDS)
async def test_service_latency_and_shared_request_info(kind: str) -> None:
    """A service export with latency tracking publishes the reference's metric for each
    sampled request in the exporting account; an import that shares gives the responder
    the requester's details (and its server) in Nats-Request-Info."""
    import json

    server = start_configured(kind, LATENCY)
    host = server.url.removeprefix("nats://")
    try:
        s = await nats.connect(f"nats://s:s@{host}")
        r = await nats.connect(f"nats://r:r@{host}", name="requester")
        infos: list[dict[str, object]] = []

        async def answer(msg: nats.aio.msg.Msg) -> None:
            infos.append(json.loads((msg.headers or {})["Nats-Request-Info"]))
            await msg.respond(b"ok")

        metrics = await s.subscribe("latency.measured")
        await s.subscribe("measured", cb=answer)
        await s.subscribe("shared", cb=answer)
        await synced(s)
        await r.request("measured", b"?", timeout=5)
        metric = json.loads((await metrics.next_msg(timeout=5)).data)
        assert metric["type"] == "io.nats.server.metric.v1.service_latency"
        assert metric["status"] == 200
        assert metric["requestor"]["acc"] == "R"
        assert metric["responder"]["acc"] == "S" and metric["responder"]["kind"] == "Client"
        assert {"start", "service", "system", "total", "id", "timestamp"} <= set(metric)
        assert metric["total"] >= metric["service"] >= 0
        await r.request("shared", b"?", timeout=5)
        shared = infos[-1]
        assert shared["acc"] == "R" and shared["name"] == "requester"
        assert {"start", "host", "id", "server", "kind", "client_type"} <= set(shared), shared
        assert set(infos[0]) <= {"acc", "rtt"}, infos[0]
        await s.close()
        await r.close()
    finally:
        server.stop()
