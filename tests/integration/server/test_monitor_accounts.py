"""The account parts of HTTP monitoring, tidings next to the reference nats-server on the same
configuration file with the same nats-py clients: /accountz (the list, and an account's
detail: its exports, its imports with those the system account gives every account, its
index's numbers), /accstatz (accounts with connections, all with ?unused=1), /connz?acc=
(open and closed connections of one account; with auth=1 each entry's account), /subsz?acc=,
and /varz's system_account."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from tests.harness import Server, start_configured, wait_until
from tests.messaging import synced

from .test_sysaccount import normal

pytestmark = pytest.mark.timeout(120)

KINDS = ["tidings", "reference"]

CONF = """
server_name: monacc
accounts {
  A: {
    users: [{user: a, password: a}]
    exports: [
      {stream: "pub.>", accounts: [B]}
      {stream: "open.>"}
      {service: "svc.x", latency: {sampling: 50, subject: "lat.x"}}
      {service: "svc.y", accounts: [B], response_type: stream}
    ]
  }
  B: {
    users: [{user: b, password: b}]
    imports: [
      {stream: {account: A, subject: "pub.>"}, prefix: from}
      {stream: {account: A, subject: "open.>"}, to: "mine.>"}
      {service: {account: A, subject: "svc.x"}}
      {service: {account: A, subject: "svc.y"}, to: "y"}
    ]
  }
  C: { users: [{user: c, password: c}] }
  $SYS: { users: [{user: sys, password: sys}] }
}
"""


def get(srv: Server, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.ports['http']}{path}",
                                timeout=10) as r:
        return json.loads(r.read())


def refused(srv: Server, path: str) -> tuple[int, str]:
    with pytest.raises(urllib.error.HTTPError) as err:
        get(srv, path)
    return err.value.code, err.value.read().decode()


def text(value: Any) -> str:
    return json.dumps(normal(value))


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Server]]:
    both = {kind: start_configured(kind, CONF, extra_args=["-m", "-1"]) for kind in KINDS}
    yield both
    for srv in both.values():
        srv.stop()


async def connect(srv: Server, user: str, name: str) -> Client:
    host = srv.url.removeprefix("nats://")
    return await nats.connect(f"nats://{user}:{user}@{host}", name=name,
                              allow_reconnect=False)


@pytest.fixture
async def clients(servers: dict[str, Server]) -> AsyncIterator[dict[str, Client]]:
    """A client of A (subscribed to a.sub) on each server."""
    made = {}
    for kind, srv in servers.items():
        nc = await connect(srv, "a", "mon-a")
        await nc.subscribe("a.sub")
        await synced(nc)
        made[kind] = nc
    yield made
    for nc in made.values():
        await nc.close()


def test_accountz_lists_the_accounts_and_names_the_system_account(
        servers: dict[str, Server]) -> None:
    lists = {kind: get(srv, "/accountz") for kind, srv in servers.items()}
    for kind, body in lists.items():
        assert sorted(body.pop("accounts")) == ["$G", "$SYS", "A", "B", "C"], kind
        assert body["system_account"] == "$SYS", kind
    assert text(lists["tidings"]) == text(lists["reference"])
    varz = {kind: get(srv, "/varz") for kind, srv in servers.items()}
    assert varz["tidings"]["system_account"] == varz["reference"]["system_account"] == "$SYS"


def _detail(srv: Server, name: str) -> dict[str, Any]:
    body = get(srv, f"/accountz?acc={name}")
    detail = body["account_detail"]
    # (The reference's $SYS.DEBUG.SUBSCRIBERS service: not in tidings.)
    detail["exports"] = [e for e in detail.get("exports", [])
                         if e["subject"] != "$SYS.DEBUG.SUBSCRIBERS"] or None
    if detail["exports"] is None:
        del detail["exports"]
    # The reference lists them from Go maps, in no particular order.
    detail.get("exports", []).sort(key=lambda e: (e["type"], e["subject"]))
    detail.get("imports", []).sort(key=lambda i: (i["subject"], i["local_subject"]))
    return body


@pytest.mark.parametrize("name", ["A", "B", "C", "$SYS", "$G"])
async def test_accountz_detail(servers: dict[str, Server], clients: dict[str, Client],
                               name: str) -> None:
    found = {kind: _detail(srv, name) for kind, srv in servers.items()}
    ours, ref = found["tidings"], found["reference"]
    assert text(ours) == text(ref)
    detail = ours["account_detail"]
    assert list(detail["sublist_stats"]) == list(ref["account_detail"]["sublist_stats"])
    assert detail["client_connections"] == ref["account_detail"]["client_connections"] == (
        1 if name == "A" else 0)
    if name == "A":
        assert [(e["subject"], e.get("approved_accounts")) for e in detail["exports"]] == [
            ("svc.x", None), ("svc.y", ["B"]), ("open.>", None), ("pub.>", ["B"])]
    if name == "B":
        assert {i["local_subject"] for i in detail["imports"]} >= {"from.pub.>", "mine.>",
                                                                   "svc.x", "y"}


def test_accountz_of_an_unknown_account_is_a_400(servers: dict[str, Server]) -> None:
    for kind, srv in servers.items():
        assert refused(srv, "/accountz?acc=nobody") == (400, "Account nobody does not exist"), \
            kind


async def test_accstatz(servers: dict[str, Server], clients: dict[str, Client]) -> None:
    for nc in clients.values():
        await nc.publish("nobody", b"xyz")
        await synced(nc)
    used = {kind: get(srv, "/accstatz") for kind, srv in servers.items()}
    every = {kind: get(srv, "/accstatz?unused=1") for kind, srv in servers.items()}
    for kind in KINDS:
        assert [s["acc"] for s in used[kind]["account_statz"]] == ["A"], kind
        assert sorted(s["acc"] for s in every[kind]["account_statz"]) == [
            "$G", "$SYS", "A", "B", "C"], kind
    ours, ref = used["tidings"]["account_statz"][0], used["reference"]["account_statz"][0]
    assert text(ours) == text(ref)
    assert ours["received"]["msgs"] >= 3 and ours["received"]["bytes"] == 3  # (synced's too)
    assert (ours["conns"], ours["total_conns"]) == (ref["conns"], ref["total_conns"]) == (1, 1)


async def test_connz_of_one_account(servers: dict[str, Server],
                                    clients: dict[str, Client]) -> None:
    others = {kind: await connect(srv, "c", "mon-c") for kind, srv in servers.items()}
    try:
        for kind, srv in servers.items():
            only_a = get(srv, "/connz?acc=A")
            assert [c["name"] for c in only_a["connections"]] == ["mon-a"], kind
            assert "account" not in only_a["connections"][0], kind  # (only with auth=1)
            with_auth = get(srv, "/connz?acc=C&auth=1")["connections"]
            assert [(c["name"], c["account"], c["authorized_user"], c["name_tag"])
                    for c in with_auth] == [("mon-c", "C", "c", "C")], kind
        found = {kind: get(srv, "/connz?acc=A&auth=1&subs=1") for kind, srv in servers.items()}
        for body in found.values():  # (nats-py's inbox for synced(): a name of its own)
            for conn in body["connections"]:
                conn["subscriptions_list"] = [s for s in conn["subscriptions_list"]
                                              if not s.startswith("_INBOX.")]
        assert text(found["tidings"]) == text(found["reference"])
        assert found["tidings"]["connections"][0]["subscriptions_list"] == ["a.sub"]
        nobody = {kind: get(srv, "/connz?acc=nobody") for kind, srv in servers.items()}
        assert text(nobody["tidings"]) == text(nobody["reference"])
        assert nobody["tidings"]["connections"] is None
    finally:
        for nc in others.values():
            await nc.close()


async def test_closed_connections_of_one_account(servers: dict[str, Server]) -> None:
    for srv in servers.values():
        nc = await connect(srv, "c", "gone-c")
        await nc.close()
    found = {}
    for kind, srv in servers.items():

        def closed(srv: Server = srv) -> list[Any]:
            conns = get(srv, "/connz?state=closed&acc=C&auth=1")["connections"] or []
            return [c for c in conns if c.get("name") == "gone-c"]

        found[kind] = wait_until(closed, 10, f"{kind}: the closed connection of C")[0]
        assert found[kind]["account"] == "C", kind
        in_a = get(srv, "/connz?state=closed&acc=A")["connections"] or []
        assert "gone-c" not in [c.get("name") for c in in_a], kind
    assert text(found["tidings"]) == text(found["reference"])


async def test_subsz_of_one_account(servers: dict[str, Server]) -> None:
    found = {}
    for kind, srv in servers.items():
        nc = await connect(srv, "c", "subs-c")
        await nc.subscribe("c.one")
        await nc.subscribe("c.two", queue="q")
        await synced(nc)
        body = get(srv, "/subsz?subs=1&acc=C")
        await nc.close()
        # The reference lists its own subscriptions too (the system imports), and nats-py's
        # for synced() are named its own way: the test's.
        subs = sorted((s for s in body["subscriptions_list"] if s["subject"].startswith("c.")),
                      key=lambda s: s["subject"])
        found[kind] = [{k: v for k, v in s.items() if k != "cid"} for s in subs]
        assert body["num_subscriptions"] >= 2, kind
    assert found["tidings"] == found["reference"] == [
        {"account": "C", "account_tag": "C", "subject": "c.one", "sid": "1", "msgs": 0},
        {"account": "C", "account_tag": "C", "subject": "c.two", "qgroup": "q", "sid": "2",
         "msgs": 0}]


async def test_connz_of_open_and_closed_connections_sorted(servers: dict[str, Server]) -> None:
    """state=all mixes open and closed connections: sorted by start (a closed one first,
    as it started first), and the reference's 400s for a bad state or sort."""
    for kind, srv in servers.items():
        gone = await connect(srv, "c", "first-c")
        await gone.close()
        stays = await connect(srv, "c", "second-c")
        try:

            def both(srv: Server = srv) -> list[Any]:
                conns = get(srv, "/connz?state=all&sort=start&acc=C")["connections"]
                return [c["name"] for c in conns if c.get("name") in ("first-c", "second-c")]

            assert wait_until(lambda both=both: len(both()) == 2 and both(), 10,
                              f"{kind}: both listed") == ["first-c", "second-c"], kind
            assert refused(srv, "/connz?state=bogus") == (400, "Error decoding state for bogus")
            assert refused(srv, "/connz?sort=bogus") == (400, "invalid sorting option: bogus")
            assert refused(srv, "/connz?sort=stop") == (
                400, "sort by stop only valid on closed connections")
        finally:
            await stays.close()
