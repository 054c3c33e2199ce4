"""The system account's events and requests, the same configuration file run by tidings and
by the reference nats-server, the same nats-py clients: CONNECT/DISCONNECT (and the account's
CONNS, a failed login's AUTH.ERR), STATSZ (asked for, broadcast on request, and on its own
schedule), $SYS.REQ.SERVER.PING.<endpoint> with options in the body (and the reference's
error answers), $SYS.REQ.ACCOUNT.<acc>.*, $SYS.REQ.USER.INFO from any account, and that only
the system account's users see any of it.

Messages are compared as JSON text after normalising what differs between any two servers
(ids, times, ports, round trips, sizes of memory and of the subject index): the same keys in
the same order, the same values otherwise."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from tests.harness import Server, start_configured
from tests.harness.shapes import json_kind as _kind
from tests.messaging import synced

pytestmark = pytest.mark.timeout(120)

KINDS = ["tidings", "reference"]

CONF = """
server_name: sysacc
accounts {
  A: {
    users: [{user: a, password: a}]
    exports: [{stream: "pub.>"}, {service: "svc.x", accounts: [B]}]
  }
  B: {
    users: [{user: b, password: b, permissions: {
      publish: {allow: ["$SYS.REQ.USER.INFO", "b.>"]}
      subscribe: {allow: ["_INBOX.>", "b.>"], deny: ["b.secret"]}
    }}]
    imports: [{stream: {account: A, subject: "pub.>"}, prefix: from}
              {service: {account: A, subject: "svc.x"}, to: "x"}]
  }
  C: { users: [{user: c, password: c}] }
  SYS: { users: [{user: sys, password: sys}] }
}
system_account: SYS
"""

# Values that differ between any two servers, by key: replaced before comparing.
VARYING = {"id", "server_id", "time", "timestamp", "now", "start", "stop", "seq", "rtt",
           "port", "cid", "ver", "version", "mem", "cpu", "cores", "gomaxprocs", "uptime",
           "idle", "last_activity", "update_time", "config_load_time", "go", "host",
           "subscriptions", "num_subscriptions", "total_connections", "sent", "received",
           "sent_to_clients", "received_from_clients", "sublist_stats", "http_req_stats",
           "pending_bytes", "in_msgs", "in_bytes", "out_msgs", "out_bytes", "git_commit",
           "config_digest", "active_accounts", "connections"}
# What the reference has and tidings leaves out: Go's feature flags, JetStream's disk I/O.
ONLY_REFERENCE = {"feature_flags", "disk_io_wait_stats", "git_commit", "config_digest"}


def normal(value: Any, keep: frozenset[str] = frozenset()) -> Any:
    """`value` with what varies replaced by its JSON type (keys in `keep` kept as they are)."""
    if isinstance(value, dict):
        return {k: (_kind(v) if k in VARYING and k not in keep else normal(v, keep))
                for k, v in value.items() if k not in ONLY_REFERENCE}
    if isinstance(value, list):
        return [normal(v, keep) for v in value]
    return value


def text(value: Any) -> str:
    """JSON text (keys in their order) of the normalised value."""
    return json.dumps(normal(value))


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Server]]:
    both = {kind: start_configured(kind, CONF) for kind in KINDS}
    yield both
    for srv in both.values():
        srv.stop()


async def connect(srv: Server, user: str, **kwargs: Any) -> Client:
    host = srv.url.removeprefix("nats://")
    return await nats.connect(f"nats://{user}:{user}@{host}", allow_reconnect=False,
                              max_reconnect_attempts=0, **kwargs)


async def ask(nc: Client, subject: str, body: bytes = b"") -> Any:
    reply = await nc.request(subject, body, timeout=5)
    return json.loads(reply.data)


async def ask_both(servers: dict[str, Server], subject: str, body: bytes = b"",
                   user: str = "sys") -> dict[str, Any]:
    answers = {}
    for kind, srv in servers.items():
        nc = await connect(srv, user)
        try:
            answers[kind] = await ask(nc, subject, body)
        finally:
            await nc.close()
    return answers


class Events:
    """The messages a subscription got, by subject."""

    def __init__(self) -> None:
        self.got: dict[str, list[Any]] = {}
        self.arrived = asyncio.Event()

    async def handle(self, msg: Any) -> None:
        self.got.setdefault(msg.subject, []).append(json.loads(msg.data) if msg.data else None)
        self.arrived.set()

    async def wait_for(self, subject: str, count: int = 1) -> list[Any]:
        async def enough() -> list[Any]:
            while len(self.got.get(subject, [])) < count:
                self.arrived.clear()
                await self.arrived.wait()
            return self.got[subject]

        return await asyncio.wait_for(enough(), 15)


async def watch(nc: Client, subject: str) -> Events:
    events = Events()
    await nc.subscribe(subject, cb=events.handle)
    await synced(nc)
    return events


# -- events ---------------------------------------------------------------------------------
async def _client_events(srv: Server) -> dict[str, Any]:
    """CONNECT, CONNS and DISCONNECT of a client of account C that publishes one message."""
    sysc = await connect(srv, "sys")
    events = await watch(sysc, "$SYS.ACCOUNT.C.>")
    c = await connect(srv, "c", name="evt")
    await c.publish("nobody.listens", b"hi")
    await synced(c)
    await c.close()
    await events.wait_for("$SYS.ACCOUNT.C.DISCONNECT")
    conns = await events.wait_for("$SYS.ACCOUNT.C.SERVER.CONNS", 2)
    connect_event = events.got["$SYS.ACCOUNT.C.CONNECT"][0]
    await sysc.close()
    return {"connect": connect_event, "disconnect": events.got["$SYS.ACCOUNT.C.DISCONNECT"][0],
            "conns": conns}


async def test_connect_and_disconnect_events(servers: dict[str, Server]) -> None:
    got = {kind: await _client_events(srv) for kind, srv in servers.items()}
    ours, ref = got["tidings"], got["reference"]
    assert ours["connect"]["type"] == "io.nats.server.advisory.v1.client_connect"
    assert ours["disconnect"]["type"] == "io.nats.server.advisory.v1.client_disconnect"
    for key in ("connect", "disconnect"):
        assert text(ours[key]) == text(ref[key]), key
    client = ours["disconnect"]["client"]
    assert (client["acc"], client["user"], client["name"], client["kind"],
            client["client_type"]) == ("C", "c", "evt", "Client", "nats")
    assert ours["disconnect"]["reason"] == ref["disconnect"]["reason"] == "Client Closed"
    keep = frozenset({"sent", "received"})
    # What the client sent: its message, and synced()'s request and the answer to it.
    assert normal(ours["disconnect"], keep)["sent"] == normal(ref["disconnect"], keep)["sent"] \
        == {"msgs": 3, "bytes": 2}
    # The account's connections: one, then none.
    for kind, events in got.items():
        assert [e["conns"] for e in events["conns"]] == [1, 0], kind
        assert events["conns"][0]["type"] == "io.nats.server.advisory.v1.account_connections"
    assert text(ours["conns"][1]) == text(ref["conns"][1])


async def _failed_login(srv: Server) -> dict[str, Any]:
    sysc = await connect(srv, "sys")
    events = await watch(sysc, "$SYS.>")
    host = srv.url.removeprefix("nats://")
    with pytest.raises(Exception, match="Authorization Violation"):
        await nats.connect(f"nats://a:wrong@{host}", allow_reconnect=False,
                           max_reconnect_attempts=0, name="intruder")
    disconnect = (await events.wait_for("$SYS.ACCOUNT.$G.DISCONNECT"))[0]
    auth_err = next(v for k, v in events.got.items() if k.endswith(".CLIENT.AUTH.ERR"))[0]
    await sysc.close()
    return {"disconnect": disconnect, "auth_err": auth_err}


async def test_a_failed_login_is_an_auth_error_and_a_disconnect_in_the_global_account(
        servers: dict[str, Server]) -> None:
    got = {kind: await _failed_login(srv) for kind, srv in servers.items()}
    for key in ("disconnect", "auth_err"):
        assert text(got["tidings"][key]) == text(got["reference"][key]), key
    client = got["tidings"]["auth_err"]["client"]
    assert (client["acc"], client["user"], client["name"]) == ("$G", "a", "intruder")
    assert got["tidings"]["auth_err"]["reason"] == "Authentication Failure"


async def test_the_embedded_streaming_client_makes_no_events(servers: dict[str, Server]) -> None:
    """tidings' own streaming connection is no client: not in CONNZ, no CONNECT."""
    answer = await ask_both(servers, "$SYS.REQ.SERVER.PING.CONNZ")
    for kind, body in answer.items():
        names = [c.get("name") for c in body["data"]["connections"]]
        assert names == [None], (kind, names)  # only the requester itself (no name)


# -- STATSZ -----------------------------------------------------------------------------------
async def test_statsz_answered_and_broadcast_on_request(servers: dict[str, Server]) -> None:
    found = {}
    for kind, srv in servers.items():
        sysc = await connect(srv, "sys")
        events = await watch(sysc, "$SYS.SERVER.*.STATSZ")
        direct = await ask(sysc, "$SYS.REQ.SERVER.PING.STATSZ")
        old_style = await ask(sysc, "$SYS.REQ.SERVER.PING")
        before = len(events.got.get(f"$SYS.SERVER.{direct['server']['id']}.STATSZ", []))
        await sysc.publish("$SYS.REQ.SERVER.PING", b"")  # no reply: broadcast now
        subject = f"$SYS.SERVER.{direct['server']['id']}.STATSZ"
        broadcast = (await events.wait_for(subject, before + 1))[-1]
        await sysc.close()
        found[kind] = (direct, old_style, broadcast)
    for ours, ref in zip(found["tidings"], found["reference"], strict=True):
        assert text(ours) == text(ref)
    direct = found["tidings"][0]
    assert direct["server"]["name"] == "sysacc"
    assert direct["statsz"]["connections"] == 1 and direct["statsz"]["active_servers"] == 1
    assert found["tidings"][1]["server"]["seq"] > direct["server"]["seq"]


@pytest.mark.parametrize("kind", KINDS)
async def test_statsz_is_sent_on_its_own_while_someone_listens(kind: str) -> None:
    """With nobody asking: the first STATSZ soon after the start, more after it."""
    srv = start_configured(kind, CONF)
    try:
        sysc = await connect(srv, "sys")
        events = Events()
        await sysc.subscribe("$SYS.SERVER.*.STATSZ", cb=events.handle)
        await synced(sysc)
        while len(events.got) < 1:
            events.arrived.clear()
            await asyncio.wait_for(events.arrived.wait(), 15)
        (subject,) = events.got
        two = await events.wait_for(subject, 2)
        assert two[0]["server"]["seq"] < two[1]["server"]["seq"]
        assert set(two[1]["statsz"]) >= {"start", "connections", "subscriptions", "sent"}
        await sysc.close()
    finally:
        srv.stop()


# -- $SYS.REQ.SERVER.PING.<endpoint> -------------------------------------------------------------
@pytest.mark.parametrize("endpoint", ["VARZ", "CONNZ", "SUBSZ", "HEALTHZ", "ROUTEZ",
                                      "ACCOUNTZ", "IDZ", "JSZ", "LEAFZ", "GATEWAYZ", "RAFTZ"])
async def test_ping_endpoints_answer_as_the_reference(servers: dict[str, Server],
                                                      endpoint: str) -> None:
    answer = await ask_both(servers, f"$SYS.REQ.SERVER.PING.{endpoint}")
    ours, ref = answer["tidings"], answer["reference"]
    if endpoint == "VARZ":
        assert ours["data"]["system_account"] == ref["data"]["system_account"] == "SYS"
        assert list(normal(ours)) == list(normal(ref))
        assert set(normal(ref["data"])) - set(normal(ours["data"])) == set()
        return
    if endpoint == "ACCOUNTZ":
        assert sorted(ours["data"].pop("accounts")) == sorted(ref["data"].pop("accounts")) \
            == ["$G", "A", "B", "C", "SYS"]
    if endpoint == "SUBSZ":  # the index's numbers: our own subscriptions are not the same
        for body in (ours, ref):
            body["data"] = {k: v for k, v in body["data"].items() if not k.startswith("num_")
                            and k not in ("cache_hit_rate", "max_fanout", "avg_fanout")}
    assert text(ours) == text(ref)
    if endpoint == "HEALTHZ":
        assert ours["data"] == {"status": "ok", "status_code": 200}


async def test_ping_connz_takes_its_options_from_the_body(servers: dict[str, Server]) -> None:
    clients = {kind: await connect(srv, "a", name="in-a") for kind, srv in servers.items()}
    try:
        answer = await ask_both(servers, "$SYS.REQ.SERVER.PING.CONNZ",
                                b'{"acc": "A", "auth": true}')
        for kind, body in answer.items():
            conns = body["data"]["connections"]
            assert [(c["name"], c["account"], c["authorized_user"]) for c in conns] == [
                ("in-a", "A", "a")], kind
        assert text(answer["tidings"]) == text(answer["reference"])
        # Names are matched as Go matches them: in any case.
        answer = await ask_both(servers, "$SYS.REQ.SERVER.PING.CONNZ", b'{"ACC": "A"}')
        for kind, body in answer.items():
            assert [c["name"] for c in body["data"]["connections"]] == ["in-a"], kind
    finally:
        for nc in clients.values():
            await nc.close()


@pytest.mark.parametrize("body", [
    b"{bad", b'{"acc": 1}', b'{"limit": "x"}', b"[1]", b'"s"', b'{"acc": "A"',
    b'{"sort": "bogus"}', b'{"filter_subject": "x"}', b'{"sort": "stop"}',
    b'{"state": 1, "sort": "reason", "acc": "nobody"}', b'{"acc": "A",}',
])
async def test_ping_connz_refuses_what_the_reference_refuses(servers: dict[str, Server],
                                                             body: bytes) -> None:
    answer = await ask_both(servers, "$SYS.REQ.SERVER.PING.CONNZ", body)
    ours, ref = answer["tidings"], answer["reference"]
    assert ("error" in ours) == ("error" in ref)
    assert ours.get("error") == ref.get("error")
    assert text(ours) == text(ref)


@pytest.mark.parametrize(("subject", "body"), [
    ("$SYS.REQ.SERVER.PING.CONNZ", b'{"cid": -1}'),
    ("$SYS.REQ.SERVER.PING.CONNZ", b'{"limit": 1e3}'),
    ("$SYS.REQ.SERVER.PING.CONNZ", b'{"limit": 99999999999999999999}'),
    ("$SYS.REQ.SERVER.PING.CONNZ", b'{"state": 99999999999999999999}'),
    ("$SYS.REQ.SERVER.PING.CONNZ", b'{"LIMIT": "x"}'),
    ("$SYS.REQ.SERVER.PING.CONNZ", '{"\u017fort": 1}'.encode()),
    ("$SYS.REQ.SERVER.PING.CONNZ", b'{"nope": 1, "limit": "1", "offset": "y"}'),
    ("$SYS.REQ.SERVER.PING.SUBSZ", b'{"tags": [1]}'),
    ("$SYS.REQ.SERVER.PING.SUBSZ", b'{"offset": -9223372036854775809}'),
    ("$SYS.REQ.SERVER.PING.GATEWAYZ", b'{"subscriptions": "x"}'),
    ("$SYS.REQ.SERVER.PING.GATEWAYZ", b'{"name": 1}'),
    ("$SYS.REQ.SERVER.PING.JSZ", b'{"limit": 1.0}'),
    ("$SYS.REQ.SERVER.PING.HEALTHZ", b"not json"),
    ("$SYS.REQ.ACCOUNT.A.STATZ", b'{"accounts": "x"}'),
    ("$SYS.REQ.ACCOUNT.PING.STATZ", b'{"accounts": [1]}'),
    ("$SYS.REQ.ACCOUNT.A.CONNZ", b'{"cid": 18446744073709551616}'),
])
async def test_option_types_refused_in_go_words(servers: dict[str, Server], subject: str,
                                                body: bytes) -> None:
    """A body is read as Go reads it into the request's options struct: a number's literal
    in the error, bounds of int and uint64, an item of a list by its index, a field named
    as the body spells it, matched as Go folds case; unknown fields are ignored."""
    answer = await ask_both(servers, subject, body)
    assert answer["reference"].get("error"), answer["reference"]
    assert answer["tidings"].get("error") == answer["reference"]["error"]
    assert text(answer["tidings"]) == text(answer["reference"])


@pytest.mark.parametrize(("subject", "body"), [
    ("$SYS.REQ.SERVER.PING.SUBSZ", b'{"test": "a.*"}'),
    ("$SYS.REQ.SERVER.PING.ACCOUNTZ", b'{"account": "nobody"}'),
    ("$SYS.REQ.SERVER.PING.STATSZ", b"{bad"),
    ("$SYS.REQ.ACCOUNT.nobody.INFO", b""),
    ("$SYS.REQ.ACCOUNT.A.JSZ", b""),
    ("$SYS.REQ.ACCOUNT.A.LEAFZ", b""),
    ("$SYS.REQ.ACCOUNT.nobody.CONNZ", b""),
])
async def test_errors_and_absent_features_as_the_reference(servers: dict[str, Server],
                                                           subject: str, body: bytes) -> None:
    answer = await ask_both(servers, subject, body)
    assert text(answer["tidings"]) == text(answer["reference"])
    assert answer["tidings"].get("error") == answer["reference"].get("error")


async def test_a_filtered_request_is_not_answered(servers: dict[str, Server]) -> None:
    """A request for another server (server_name; a tag "", as Go reads a null in the list)
    gets no answer; ours comes in order."""
    for kind, srv in servers.items():
        since = srv.log_size()
        sysc = await connect(srv, "sys")
        inbox = sysc.new_inbox()
        sub = await sysc.subscribe(inbox)
        for body in (b'{"server_name": "other"}', b'{"tags": [null]}',
                     b'{"server_name": "sysacc", "exact_match": true}'):
            await sysc.publish("$SYS.REQ.SERVER.PING.HEALTHZ", body, reply=inbox)
        first = json.loads((await sub.next_msg(timeout=5)).data)
        assert first["data"]["status"] == "ok", kind
        await sysc.publish("$SYS.REQ.SERVER.PING.IDZ", b"", reply=inbox)
        second = json.loads((await sub.next_msg(timeout=5)).data)
        assert set(second) == {"name", "host", "id"}, kind  # (no second HEALTHZ between)
        await sysc.close()
        assert "Traceback" not in srv.log(since), kind


async def test_no_responders_where_the_reference_has_none(servers: dict[str, Server]) -> None:
    for srv in servers.values():
        sysc, a = await connect(srv, "sys"), await connect(srv, "a")
        try:
            for nc, subject in ((sysc, "$SYS.REQ.SERVER.PING.NOPE"),
                                (a, "$SYS.REQ.SERVER.PING"),
                                (a, "$SYS.REQ.ACCOUNT.A.CONNZ")):
                with pytest.raises(nats.errors.NoRespondersError):
                    await nc.request(subject, b"", timeout=5)
        finally:
            await sysc.close()
            await a.close()


# -- $SYS.REQ.ACCOUNT.<acc>.* ---------------------------------------------------------------------
async def test_account_connz_info_statz_and_conns(servers: dict[str, Server]) -> None:
    clients = {kind: await connect(srv, "a", name="in-a") for kind, srv in servers.items()}
    try:
        connz = await ask_both(servers, "$SYS.REQ.ACCOUNT.A.CONNZ")
        assert text(connz["tidings"]) == text(connz["reference"])
        assert [c["name"] for c in connz["tidings"]["data"]["connections"]] == ["in-a"]
        info = await ask_both(servers, "$SYS.REQ.ACCOUNT.B.INFO")
        for body in info.values():
            body["data"]["imports"].sort(key=lambda i: (i["subject"], i["local_subject"]))
        assert text(info["tidings"]) == text(info["reference"])
        statz = await ask_both(servers, "$SYS.REQ.ACCOUNT.A.STATZ")
        assert text(statz["tidings"]) == text(statz["reference"])
        assert [s["conns"] for s in statz["tidings"]["data"]["account_statz"]] == [1]
        conns = await ask_both(servers, "$SYS.REQ.ACCOUNT.A.CONNS")
        assert text(conns["tidings"]) == text(conns["reference"])
        assert conns["tidings"]["type"] == "io.nats.server.advisory.v1.account_connections"
        ping = await ask_both(servers, "$SYS.REQ.ACCOUNT.PING.STATZ",
                              b'{"accounts": ["C"], "include_unused": true}')
        assert text(ping["tidings"]) == text(ping["reference"])
        assert [s["acc"] for s in ping["tidings"]["data"]["account_statz"]] == ["C"]
    finally:
        for nc in clients.values():
            await nc.close()


async def test_an_account_asks_for_its_own_connections_and_numbers(
        servers: dict[str, Server]) -> None:
    """The reference imports PING.CONNZ and PING.STATZ into every account: each sees only
    its own."""
    for subject in ("$SYS.REQ.SERVER.PING.CONNZ", "$SYS.REQ.ACCOUNT.PING.CONNZ",
                    "$SYS.REQ.ACCOUNT.PING.STATZ"):
        answer = await ask_both(servers, subject, b'{"acc": "B"}', user="a")
        assert text(answer["tidings"]) == text(answer["reference"]), subject
        data = answer["tidings"]["data"]
        if "connections" in data:
            assert len(data["connections"]) == 1  # the requester, of A
        else:
            assert [s["acc"] for s in data["account_statz"]] == ["A"]


# -- $SYS.REQ.USER.INFO -------------------------------------------------------------------------
@pytest.mark.parametrize("user", ["a", "b", "sys"])
async def test_user_info(servers: dict[str, Server], user: str) -> None:
    answer = await ask_both(servers, "$SYS.REQ.USER.INFO", user=user)
    for body in answer.values():
        for side in body["data"].get("permissions", {}).values():
            for entries in side.values():
                entries.sort()
    assert text(answer["tidings"]) == text(answer["reference"])
    data = answer["tidings"]["data"]
    assert (data["user"], data["account"]) == (user, user.upper())
    if user == "b":
        assert data["permissions"] == {
            "publish": {"allow": ["$SYS.REQ.USER.INFO", "b.>"]},
            "subscribe": {"allow": ["_INBOX.>", "b.>"], "deny": ["b.secret"]}}


# -- only the system account sees it ----------------------------------------------------------------
async def test_other_accounts_see_no_system_events(servers: dict[str, Server]) -> None:
    for kind, srv in servers.items():
        a = await connect(srv, "a")
        seen = await watch(a, "$SYS.>")
        c = await connect(srv, "c")
        await c.close()
        await ask(a, "$SYS.REQ.USER.INFO")  # (answered in A, after the events would be)
        await synced(a)
        # Only A's own request (its subscription matches it), nothing of the system's.
        assert list(seen.got) == ["$SYS.REQ.USER.INFO"], kind
        await a.close()


# -- in a cluster ---------------------------------------------------------------------------------
CLUSTER_CONF = CONF.replace("server_name: sysacc\n", "")


async def _answers(nc: Client, subject: str, want: int) -> list[Any]:
    """The answers to one request: `want` of them, then whatever comes in a quiet spell."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(subject, b"", reply=inbox)
    got: list[Any] = []
    while True:
        # The first within 10 s; the others soon after it.
        timeout = 10.0 if not got else 2.0 if len(got) < want else 0.5
        try:
            got.append(json.loads((await sub.next_msg(timeout=timeout)).data))
        except nats.errors.TimeoutError:
            break
    await sub.unsubscribe()
    return got


@pytest.mark.parametrize(("first", "second"), [
    ("tidings", "tidings"), ("tidings", "reference"), ("reference", "tidings"),
    ("reference", "reference")])
async def test_every_server_of_a_cluster_answers_once(first: str, second: str) -> None:
    """PING reaches every server (tidings or the reference); an account's PING.CONNZ is
    answered by each server for that account; USER.INFO by the requester's server only."""
    a = start_configured(first, CLUSTER_CONF, cluster=True, cluster_name="sys")
    try:
        b = start_configured(second, CLUSTER_CONF, cluster=True, cluster_name="sys",
                             routes=[a])
        try:
            sysc = await connect(a, "sys")
            for _ in range(20):  # (the route is being made: until both answer)
                ids = {answer["id"] for answer in
                       await _answers(sysc, "$SYS.REQ.SERVER.PING.IDZ", 2)}
                if len(ids) == 2:
                    break
            assert len(ids) == 2
            pings = await _answers(sysc, "$SYS.REQ.SERVER.PING", 2)
            assert sorted(p["server"]["id"] for p in pings) == sorted(ids)
            in_a = await connect(b, "a", name="far-a")
            await synced(in_a)
            asker = await connect(a, "a")
            connz = await _answers(asker, "$SYS.REQ.SERVER.PING.CONNZ", 2)
            assert sorted(c["server"]["id"] for c in connz) == sorted(ids)
            names = sorted(c.get("name", "") for answer in connz
                           for c in answer["data"]["connections"])
            assert names == ["", "far-a"]  # each server's own clients of A
            info = await _answers(asker, "$SYS.REQ.USER.INFO", 1)
            assert [i["data"]["account"] for i in info] == ["A"]
            for nc in (sysc, in_a, asker):
                await nc.close()
        finally:
            b.stop()
    finally:
        a.stop()
