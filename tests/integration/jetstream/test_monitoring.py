"""JetStream's monitoring on tidings and on the reference nats-server, after the same
nats-py workload on each: /jsz (plain, with accounts, streams, consumers, configurations,
one account), /varz's `jetstream` block, /healthz's JetStream checks, /accountz's account
detail, and `$SYS.REQ.SERVER.PING.JSZ` / `$SYS.REQ.ACCOUNT.<acc>.JSZ` with accounts and a
system account.

Answers are compared as JSON text (keys in their order) after normalising what differs
between any two servers (ids, times, the machine's share of memory and disk, versions)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StorageType
from nats.js.errors import NotFoundError

from tests.harness import Server, start_configured, start_reference, start_tidings
from tests.harness.shapes import json_kind as _kind

pytestmark = pytest.mark.timeout(120)

KINDS = ["tidings", "reference"]
NAME = "jsmon"  # both servers' name (a stream's leader)
# Values that differ between any two servers, by key: replaced by their JSON type.
VARYING = {"server_id", "now", "created", "first_ts", "last_ts", "ts", "last_active",
           "store_dir", "max_memory", "max_storage", "time", "id", "ver", "seq",
           # tidings says it is 2.11.0 (API level 1); the reference is newer.
           "level",
           # the configured JetStream limits: the reference shows its default of
           # default_max_consumers (config/jetstream.py's JetStreamLimits has no such key)
           "limits"}
# Keys of the server envelope only the reference has (Go's feature flags).
ONLY_REFERENCE = {"feature_flags"}
# Stream configuration keys tidings writes as false where the reference leaves them out
# (stream.normalize keeps a false that nats-py sent for these omitempty fields).
ONLY_TIDINGS = {"no_ack", "discard_new_per_subject"}


def normal(value: Any) -> Any:
    """`value` with what varies replaced by its JSON type, lists of named things sorted
    by name (the reference lists streams from a Go map)."""
    if isinstance(value, dict):
        return {k: (_kind(v) if k in VARYING else normal(v))
                for k, v in value.items() if k not in ONLY_REFERENCE | ONLY_TIDINGS}
    if isinstance(value, list):
        items = [normal(v) for v in value]
        if all(isinstance(v, dict) and "name" in v for v in value):
            order = sorted(range(len(value)), key=lambda i: str(value[i]["name"]))
            items = [items[i] for i in order]
        return items
    return value


def text(value: Any) -> str:
    return json.dumps(normal(value), indent=1)


# What tidings' JetStream says otherwise than the reference, outside monitoring, by the
# block it is in: an `api` block's request total (api.py's JetStream._request counts a
# consumer's pull requests, CONSUMER.MSG.NEXT, the reference only the API's own requests);
# an `ack_floor`'s last_active (consumer.py's info has none, the reference's says when the
# last ack came).
GAPS = {"api": "total", "ack_floor": "last_active"}


def without_gaps(value: Any) -> Any:
    """`value` without the GAPS."""
    if isinstance(value, dict):
        return {k: without_gaps({n: v for n, v in v.items() if n != GAPS[k]}
                                if k in GAPS and isinstance(v, dict) else v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [without_gaps(v) for v in value]
    return value


def get(server: Server, path: str) -> tuple[int, Any]:
    """(status, JSON or text) of a monitoring endpoint."""
    url = f"http://127.0.0.1:{server.ports['http']}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        body = exc.read().decode()
        try:
            return exc.code, json.loads(body)
        except ValueError:
            return exc.code, body


async def workload(url: str) -> None:
    """Two streams (memory and file), two durable consumers, one delivery acknowledged,
    one API error."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"], storage=StorageType.MEMORY)
    await js.add_stream(name="FILES", subjects=["files.>"], storage=StorageType.FILE)
    for i in range(3):
        await js.publish("orders.new", b"x" * i)
    await js.publish("files.a", b"hello")
    await js.add_consumer("ORDERS", ConsumerConfig(durable_name="D1",
                                                   ack_policy=AckPolicy.EXPLICIT,
                                                   filter_subject="orders.>"))
    await js.add_consumer("ORDERS", ConsumerConfig(durable_name="D2",
                                                   ack_policy=AckPolicy.EXPLICIT))
    sub = await js.pull_subscribe_bind("D1", stream="ORDERS")
    (msg,) = await sub.fetch(1, timeout=5)
    await msg.ack_sync()
    with pytest.raises(NotFoundError):
        await js.stream_info("NOPE")
    await nc.close()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    both: dict[str, Server] = {}
    try:
        for kind in KINDS:
            args = ["-js", "-sd", str(tmp_path_factory.mktemp(kind)), "-m", "-1"]
            if kind == "tidings":
                both[kind] = start_tidings(extra_args=args, streaming=False, name=NAME)
            else:
                both[kind] = start_reference(extra_args=args, name=NAME)
            asyncio.run(workload(both[kind].url))
        yield both
    finally:
        for srv in both.values():
            srv.stop()


def get_both(servers: dict[str, Server], path: str) -> dict[str, tuple[int, Any]]:
    return {kind: get(srv, path) for kind, srv in servers.items()}


# -- /jsz ----------------------------------------------------------------------------------
@pytest.mark.parametrize("query", [
    "", "?accounts=true", "?streams=true", "?consumers=true", "?consumers=true&config=true",
    "?acc=$G", "?acc=$G&streams=1", "?acc=NOPE", "?accounts=1&offset=1", "?raft=true",
])
def test_jsz_answers_as_the_reference(servers: dict[str, Server], query: str) -> None:
    answers = get_both(servers, "/jsz" + query)
    (code, ours), (ref_code, ref) = answers["tidings"], answers["reference"]
    assert code == ref_code == 200
    assert text(without_gaps(ours)) == text(without_gaps(ref))


def test_jsz_counts_what_the_workload_made(servers: dict[str, Server]) -> None:
    _, jsz = get(servers["tidings"], "/jsz?consumers=true")
    assert (jsz["streams"], jsz["consumers"], jsz["messages"], jsz["total"]) == (2, 2, 4, 1)
    assert jsz["bytes"] == jsz["memory"] + jsz["storage"]
    (account,) = jsz["account_details"]
    assert account["name"] == account["id"] == "$G"
    streams = {s["name"]: s for s in account["stream_detail"]}
    assert streams["ORDERS"]["state"]["messages"] == 3
    assert "config" not in streams["ORDERS"]  # (only with config=true)
    d1 = next(c for c in streams["ORDERS"]["consumer_detail"] if c["name"] == "D1")
    assert (d1["delivered"]["stream_seq"], d1["ack_floor"]["stream_seq"],
            d1["num_pending"]) == (1, 1, 2)
    assert "config" not in d1
    assert "consumer_detail" not in streams["FILES"]


@pytest.mark.parametrize("kind", KINDS)
def test_jsz_config_is_what_stream_and_consumer_info_say(servers: dict[str, Server],
                                                         kind: str) -> None:
    _, jsz = get(servers[kind], "/jsz?consumers=true&config=true")
    (account,) = jsz["account_details"]
    orders = next(s for s in account["stream_detail"] if s["name"] == "ORDERS")

    async def infos() -> tuple[Any, Any]:
        nc = await nats.connect(servers[kind].url)
        try:
            stream = await nc.request("$JS.API.STREAM.INFO.ORDERS", b"", timeout=5)
            consumer = await nc.request("$JS.API.CONSUMER.INFO.ORDERS.D2", b"", timeout=5)
            return json.loads(stream.data), json.loads(consumer.data)
        finally:
            await nc.close()

    stream, consumer = asyncio.run(infos())
    assert orders["config"] == stored(stream["config"])
    assert orders["created"] == stream["created"]
    d2 = next(c for c in orders["consumer_detail"] if c["name"] == "D2")
    assert d2["config"] == stored(consumer["config"])


def stored(config: dict[str, Any]) -> dict[str, Any]:
    """A configuration as INFO gives it, without what INFO adds: the server's version
    and API level in its metadata."""
    metadata = {k: v for k, v in config["metadata"].items()
                if k not in ("_nats.ver", "_nats.level")}
    return {**config, "metadata": metadata}


@pytest.mark.parametrize("query", ["?accounts=maybe", "?consumers=2", "?limit=x",
                                   "?offset=1.5"])
def test_jsz_refuses_what_the_reference_refuses(servers: dict[str, Server], query: str) -> None:
    answers = get_both(servers, "/jsz" + query)
    assert answers["tidings"] == answers["reference"]
    assert answers["tidings"][0] == 400


@pytest.mark.parametrize("query", ["", "?accounts=true", "?leader-only=true"])
def test_jsz_without_jetstream(query: str) -> None:
    servers = {"tidings": start_tidings(extra_args=["-m", "-1"], streaming=False),
               "reference": start_reference(extra_args=["-m", "-1"])}
    try:
        answers = get_both(servers, "/jsz" + query)
    finally:
        for srv in servers.values():
            srv.stop()
    (code, ours), (ref_code, ref) = answers["tidings"], answers["reference"]
    assert code == ref_code
    assert text(ours) == text(ref)


# -- /varz, /accountz ----------------------------------------------------------------------
def test_varz_jetstream_block(servers: dict[str, Server]) -> None:
    answers = get_both(servers, "/varz")
    ours, ref = answers["tidings"][1]["jetstream"], answers["reference"][1]["jetstream"]
    assert text(without_gaps(ours)) == text(without_gaps(ref))
    stats = ours["stats"]
    assert (stats["accounts"], stats["api"]["errors"]) == (1, 1)
    _, jsz = get(servers["tidings"], "/jsz")
    assert {k: jsz[k] for k in stats} == stats


def test_accountz_says_the_account_has_jetstream(servers: dict[str, Server]) -> None:
    answers = get_both(servers, "/accountz?acc=$G")
    ours, ref = (answers[k][1]["account_detail"] for k in KINDS)
    assert ours["jetstream_enabled"] is ref["jetstream_enabled"] is True
    api = [i for i in ref["imports"] if i["subject"] == "$JS.API.>"]
    assert [i for i in ours["imports"] if i["subject"] == "$JS.API.>"] == api != []


# -- /healthz ------------------------------------------------------------------------------
@pytest.mark.parametrize("query", [
    "?js-enabled-only=true", "?js-server-only=true", "", "?js-enabled=true",
    "?account=$G", "?account=$G&stream=FILES", "?account=$G&stream=ORDERS",
    "?account=$G&stream=ORDERS&details=true", "?account=NOPE", "?account=NOPE&details=1",
    "?account=$G&stream=FILES&consumer=NOPE", "?consumer=D1", "?consumer=D1&details=true",
])
def test_healthz_as_the_reference(servers: dict[str, Server], query: str) -> None:
    """A memory stream has no folder in the store: the reference's single-server check
    does not find it (the same here)."""
    answers = get_both(servers, "/healthz" + query)
    assert answers["tidings"] == answers["reference"]


# -- the system account --------------------------------------------------------------------
ACCOUNTS = """
accounts {
  A: { jetstream: enabled, users: [{user: a, password: a}] }
  B: { jetstream: enabled, users: [{user: b, password: b}] }
  C: { users: [{user: c, password: c}] }
  SYS: { users: [{user: sys, password: sys}] }
}
system_account: SYS
"""


async def _sys_answers(srv: Server) -> dict[str, Any]:
    host = srv.url.removeprefix("nats://")
    a = await nats.connect(f"nats://a:a@{host}")
    js = a.jetstream()
    await js.add_stream(name="S1", subjects=["s1"], storage=StorageType.MEMORY)
    await js.publish("s1", b"abc")
    await js.add_consumer("S1", ConsumerConfig(durable_name="C1"))
    await a.close()
    sysc = await nats.connect(f"nats://sys:sys@{host}")
    answers = {}
    try:
        for subject, body in [
            ("$SYS.REQ.SERVER.PING.JSZ", b""),
            ("$SYS.REQ.SERVER.PING.JSZ", b'{"accounts": true, "consumer": true, "config": true}'),
            ("$SYS.REQ.ACCOUNT.A.JSZ", b'{"streams": true, "consumer": true}'),
            ("$SYS.REQ.ACCOUNT.A.JSZ", b'{"consumer": true}'),
            ("$SYS.REQ.ACCOUNT.C.JSZ", b""),
            ("$SYS.REQ.ACCOUNT.NOPE.JSZ", b""),
            ("$SYS.REQ.SERVER.PING.HEALTHZ", b'{"js-enabled-only": true}'),
        ]:
            reply = await sysc.request(subject, body, timeout=5)
            answers[f"{subject} {body.decode()}"] = json.loads(reply.data)
    finally:
        await sysc.close()
    return answers


def test_jsz_through_the_system_account(tmp_path: Path) -> None:
    answers = {}
    for kind in KINDS:
        store = tmp_path / kind
        conf = f'server_name: {NAME}\njetstream {{ store_dir: "{store}" }}\n' + ACCOUNTS
        srv = start_configured(kind, conf, streaming=False)
        try:
            answers[kind] = asyncio.run(_sys_answers(srv))
        finally:
            srv.stop()
    for request, ref in answers["reference"].items():
        ours = answers["tidings"][request]
        if "JSZ" in request and ref.get("data"):
            # JetStream counts API requests for the whole server, not per account: with
            # two accounts, an account's own counts are not known (api.py).
            for body in (ours, ref):
                for detail in ([body["data"]] if "ACCOUNT." in request
                               else body["data"].get("account_details", [])):
                    detail["api"] = "<per account>"
        assert text(ours) == text(ref), request
    ping = answers["tidings"]["$SYS.REQ.SERVER.PING.JSZ "]
    assert (ping["server"]["jetstream"], ping["data"]["accounts"]) == (True, 2)
