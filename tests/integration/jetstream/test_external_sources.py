"""Mirrors and sources with `external: {api, deliver}` (external.py) on tidings and on the
reference nats-server, one server each with the same configuration: account A exports its
`$JS.API.>` (and the deliver subjects, and flow control's `$JS.FC.>`), account B imports
them under `$JS.A.API`, and B's streams mirror and source A's through the import. What the
copies hold is compared (sequences, subjects, headers, data), as are the configurations the
reference refuses, a mirror through the server's own domain prefix (which the reference
does not answer on one server: it copies nothing), a consumer lost and made again, and a
KV bucket mirrored into the other account."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import DiscardPolicy, ExternalStream, StreamConfig, StreamSource
from nats.js.kv import KeyValue

from tests.harness import Server, start_configured
from tests.integration.jetstream.conftest import KINDS
from tests.integration.jetstream.copies import api, in_step, messages, until

CONF = """
jetstream: {{ store_dir: "{store}", domain: "hub" }}
accounts: {{
  A {{
    jetstream: enabled
    users: [{{ user: "a", password: "a" }}]
    exports: [{{ service: "$JS.API.>" }}, {{ stream: "dlv.>" }}, {{ service: "$JS.FC.>" }}]
  }}
  B {{
    jetstream: enabled
    users: [{{ user: "b", password: "b" }}]
    imports: [
      {{ service: {{ account: "A", subject: "$JS.API.>" }}, to: "$JS.A.API.>" }}
      {{ stream: {{ account: "A", subject: "dlv.>" }} }}
      {{ service: {{ account: "A", subject: "$JS.FC.>" }} }}
    ]
  }}
}}
"""
API = "$JS.A.API"  # A's JetStream, as B imports it
SOURCE_OF_O = "O:z0zeNTHp"  # a source of A's stream O through API, as the header names it


def start(kind: str, store: Path) -> Server:
    return start_configured(kind, CONF.format(store=store), streaming=False)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    store = tmp_path_factory.mktemp("external")
    pair = [start(kind, store / kind) for kind in KINDS]
    yield pair
    for srv in pair:
        srv.stop()


async def clients(server: Server) -> tuple[Client, Client]:
    """A client of account A (the origins') and one of account B (the copies')."""
    return (await nats.connect(server.url, user="a", password="a"),
            await nats.connect(server.url, user="b", password="b"))


def without_expected(hdrs: str) -> str:
    """Headers as a copy keeps them: the publish's Nats-Expected-* left out."""
    lines = [line for line in hdrs.split("\r\n") if not line.startswith("Nats-Expected-")]
    return "\r\n".join(lines) if len(lines) > 3 else ""


def external(deliver: str, api_prefix: str = API) -> dict[str, str]:
    return {"api": api_prefix, "deliver": deliver}


async def delete(nc: Client, *streams: str) -> None:
    for name in streams:
        await api(nc, f"STREAM.DELETE.{name}")


# -- a mirror ---------------------------------------------------------------------------------

async def mirror_run(server: Server, storage: str) -> dict[str, Any]:
    a, b = await clients(server)
    origin, mirror = f"MO{storage[0]}", f"MM{storage[0]}"
    try:
        await api(a, f"STREAM.CREATE.{origin}", {"name": origin, "subjects": [f"{origin}.>"],
                                                 "storage": storage})
        for i in range(6):
            await a.request(f"{origin}.{i % 2}", b"m%d" % i,
                            headers={"Nats-Msg-Id": f"i{i}", "Nats-Expected-Stream": origin})
        await api(a, f"STREAM.MSG.DELETE.{origin}", {"seq": 2})
        created = await api(b, f"STREAM.CREATE.{mirror}", {
            "name": mirror, "storage": storage,
            "mirror": {"name": origin, "external": external("dlv.mirror")}})
        await in_step(b, mirror, 6)
        await a.request(f"{origin}.9", b"later")
        info = await in_step(b, mirror, 7)
        copies, originals = await messages(b, mirror), await messages(a, origin)
        await delete(b, mirror)
        await delete(a, origin)
        return {"created": created["mirror"], "config": created["config"]["mirror"],
                "state": {k: info["state"][k] for k in ("messages", "first_seq", "last_seq",
                                                        "num_deleted")},
                "info": {k: v for k, v in info["mirror"].items() if k != "active"},
                "same": copies == [{**m, "hdrs": without_expected(m["hdrs"])}
                                   for m in originals],
                "copies": [(m["seq"], m["subject"], m["hdrs"], m["data"]) for m in copies]}
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("storage", ["memory", "file"])
async def test_a_mirror_through_another_accounts_api_keeps_its_origins_sequences(
        servers: list[Server], storage: str) -> None:
    ours, theirs = [await mirror_run(srv, storage) for srv in servers]
    assert theirs["same"] and ours["same"]  # (sequences, gaps, subjects, headers, times)
    assert ours == theirs
    assert ours["created"] == {"name": f"MO{storage[0]}", "external": external("dlv.mirror"),
                               "lag": 0, "active": -1}
    assert [c[0] for c in ours["copies"]] == [1, 3, 4, 5, 6, 7]


async def flow_run(server: Server) -> tuple[int, int]:
    """More than a flow control window (2 MB) for the mirror's consumer to deliver."""
    a, b = await clients(server)
    try:
        await api(a, "STREAM.CREATE.FO", {"name": "FO", "subjects": ["fo"], "storage": "memory"})
        chunk = b"x" * 65536
        for _ in range(48):
            await a.request("fo", chunk)
        await api(b, "STREAM.CREATE.FM", {"name": "FM", "storage": "memory",
                                          "mirror": {"name": "FO", "external": external("dlv.f")}})
        info = await in_step(b, "FM", 48)
        await delete(b, "FM")
        await delete(a, "FO")
        return info["state"]["messages"], info["state"]["bytes"]
    finally:
        await a.close()
        await b.close()


async def test_a_mirror_answers_its_consumers_flow_control(servers: list[Server]) -> None:
    ours, theirs = [await flow_run(srv) for srv in servers]
    assert ours == theirs
    assert ours[0] == 48


async def test_a_local_mirror_leaves_out_the_publishes_expected_headers(
        servers: list[Server]) -> None:
    """(as the reference's mirror does, through its consumer or not)"""
    copies = []
    for server in servers:
        a, b = await clients(server)
        try:
            await api(a, "STREAM.CREATE.LO", {"name": "LO", "subjects": ["lo"],
                                              "storage": "memory"})
            await a.request("lo", b"1", headers={"Nats-Expected-Stream": "LO", "K": "v"})
            await a.request("lo", b"2", headers={"Nats-Expected-Last-Sequence": "1"})
            await api(a, "STREAM.CREATE.LM", {"name": "LM", "storage": "memory",
                                              "mirror": {"name": "LO"}})
            await in_step(a, "LM", 2)
            copies.append([(m["seq"], m["hdrs"]) for m in await messages(a, "LM")])
            await delete(a, "LM", "LO")
        finally:
            await a.close()
            await b.close()
    ours, theirs = copies
    assert ours == theirs == [(1, "NATS/1.0\r\nK: v\r\n\r\n"), (2, "")]


# -- sources ----------------------------------------------------------------------------------

def _without_ident(msg: dict[str, Any]) -> tuple[str, str, str]:
    """A sourced message as both servers write it, the origin's identity (the header's
    sixth field, which only the reference's API tells a link) left out."""
    lines = []
    for line in msg["hdrs"].split("\r\n"):
        if line.startswith("Nats-Stream-Source:"):
            line = " ".join(line.split(" ")[:6])
        lines.append(line)
    return msg["subject"], "\r\n".join(lines), msg.get("data", "")


async def sources_run(server: Server) -> dict[str, Any]:
    a, b = await clients(server)
    try:
        await api(a, "STREAM.CREATE.O", {"name": "O", "subjects": ["o.>"], "storage": "memory"})
        await api(b, "STREAM.CREATE.L", {"name": "L", "subjects": ["l.>"], "storage": "memory"})
        for i in range(4):
            await a.request(f"o.{i % 2}", b"a%d" % i, headers={"Nats-Expected-Stream": "O"})
            await b.request(f"l.{i}", b"l%d" % i)
        created = await api(b, "STREAM.CREATE.SS", {
            "name": "SS", "subjects": ["ss.>"], "storage": "memory",
            "sources": [{"name": "O", "filter_subject": "o.1", "opt_start_seq": 3,
                         "external": external("dlv.s1")},
                        {"name": "O", "external": external("dlv.s2"),
                         "subject_transforms": [{"src": "o.0", "dest": "x.0"}]},
                        {"name": "L", "opt_start_seq": 3}]})
        await in_step(b, "SS", 5)
        await a.request("o.1", b"later")
        await b.request("ss.own", b"own")
        info = await in_step(b, "SS", 7)
        got = await messages(b, "SS")
        await delete(b, "SS", "L")
        await delete(a, "O")
        config = {k: v for k, v in created["config"].items() if k != "metadata"}
        return {"config": config,
                "created": sorted(json.dumps(s, sort_keys=True) for s in created["sources"]),
                "state": {k: info["state"][k] for k in ("messages", "first_seq", "last_seq")},
                "sources": sorted(json.dumps({k: v for k, v in s.items() if k != "active"},
                                             sort_keys=True) for s in info["sources"]),
                "messages": sorted(_without_ident(m) for m in got)}
    finally:
        await a.close()
        await b.close()


async def test_sources_through_another_accounts_api_add_the_source_header(
        servers: list[Server]) -> None:
    ours, theirs = [await sources_run(srv) for srv in servers]
    assert ours == theirs
    assert ("x.0", f"NATS/1.0\r\nNats-Stream-Source: {SOURCE_OF_O} 1 o.0 x.0 o.0\r\n\r\n",
            "YTA=") in ours["messages"]  # (the origin's Nats-Expected-* not copied)
    assert ("o.1", f"NATS/1.0\r\nNats-Stream-Source: {SOURCE_OF_O} 5 o.1 > o.1\r\n\r\n",
            "bGF0ZXI=") in ours["messages"]


# -- what the reference does not do on one server ----------------------------------------------

async def own_domain_run(server: Server) -> dict[str, Any]:
    """A mirror through `$JS.hub.API`, the server's own domain, beside one through the
    import: once the second has copied everything, the first's request has long been out,
    and nobody answered it."""
    a, b = await clients(server)
    try:
        await api(b, "STREAM.CREATE.DO", {"name": "DO", "subjects": ["do"], "storage": "memory"})
        await api(a, "STREAM.CREATE.DO", {"name": "DO", "subjects": ["do"], "storage": "memory"})
        await b.request("do", b"b's own")
        await a.request("do", b"a's")
        own = await api(b, "STREAM.CREATE.DM", {
            "name": "DM", "storage": "memory",
            "mirror": {"name": "DO", "external": {"api": "$JS.hub.API"}}})
        await api(b, "STREAM.CREATE.XM", {"name": "XM", "storage": "memory",
                                          "mirror": {"name": "DO", "external": external("dlv.x")}})
        await in_step(b, "XM", 1)
        info = await api(b, "STREAM.INFO.DM")
        await delete(b, "DM", "XM", "DO")
        await delete(a, "DO")
        return {"created": own.get("mirror"), "state": info["state"]["messages"],
                "mirror": info["mirror"]}
    finally:
        await a.close()
        await b.close()


async def test_a_mirror_through_the_servers_own_domain_copies_nothing(
        servers: list[Server]) -> None:
    ours, theirs = [await own_domain_run(srv) for srv in servers]
    assert ours == theirs
    assert ours["state"] == 0
    assert ours["mirror"] == {"name": "DO", "external": {"api": "$JS.hub.API", "deliver": ""},
                              "lag": 0, "active": -1}


async def missing_run(server: Server) -> dict[str, Any]:
    """A mirror and a source of a stream A does not have: the consumer create's refusal
    is each link's `error`."""
    a, b = await clients(server)
    try:
        await api(b, "STREAM.CREATE.NM", {"name": "NM", "storage": "memory", "mirror": {
            "name": "NOPE", "external": external("dlv.n")}})
        await api(b, "STREAM.CREATE.NS", {"name": "NS", "storage": "memory", "subjects": ["ns"],
                                          "sources": [{"name": "NOPE",
                                                       "external": external("dlv.n")}]})

        async def refused() -> tuple[Any, Any] | None:
            mirror = (await api(b, "STREAM.INFO.NM"))["mirror"]
            source = (await api(b, "STREAM.INFO.NS"))["sources"][0]
            return (mirror, source) if "error" in mirror and "error" in source else None
        mirror, source = await until(refused)
        await delete(b, "NM", "NS")
        return {"mirror": mirror, "source": source}
    finally:
        await a.close()
        await b.close()


async def test_a_missing_origin_is_the_links_error(servers: list[Server]) -> None:
    ours, theirs = [await missing_run(srv) for srv in servers]
    assert ours == theirs
    assert ours["mirror"] == {"name": "NOPE", "external": external("dlv.n"), "lag": 0,
                              "active": -1, "error": {"code": 404, "err_code": 10059,
                                                      "description": "stream not found"}}


# -- configurations ---------------------------------------------------------------------------------

CONFIGS: list[dict[str, Any]] = [
    {"mirror": {"name": "O", "external": {"api": "$JS.API", "deliver": "here"}}},
    {"sources": [{"name": "O", "external": {"api": "$JS.API"}}]},
    {"mirror": {"name": "O", "external": external("dlv.*")}},
    {"sources": [{"name": "O", "external": external("dlv.>")}]},
    {"mirror": {"name": "O", "external": {"api": "$JS.*.API"}}},
    {"mirror": {"name": "O", "external": {"api": "a b"}}},
    {"sources": [{"name": "RO"}, {"name": "X", "external": external("ro")}]},
    {"sources": [{"name": "O", "external": {"api": API}},
                 {"name": "O", "external": external("d")}]},
    {"sources": [{"name": "R.O", "external": {"api": API}}]},
    # accepted:
    {"sources": [{"name": "RO"}, {"name": "X", "external": external("x")}]},
    {"sources": [{"name": "O", "external": {"api": API}},
                 {"name": "O", "external": {"api": "$JS.B.API"}}]},
    {"sources": [{"name": "O", "external": {"api": API}}, {"name": "O"}]},
    {"mirror": {"name": "R.O", "external": {"api": API}}},
    {"mirror": {"name": "RO", "external": {"api": API}}, "max_msg_size": 10},
    {"mirror": {"name": "O", "external": {}}},
    {"mirror": {"name": "O", "external": {"api": "$JS.API.x"}}},
]


async def test_external_configurations_are_refused_and_echoed_as_by_the_reference(
        servers: list[Server]) -> None:
    answers = []
    for server in servers:
        a, b = await clients(server)
        try:
            await api(b, "STREAM.CREATE.RO", {"name": "RO", "subjects": ["ro.>"],
                                              "storage": "memory", "max_msg_size": 100})
            got = []
            for case in CONFIGS:
                made = await api(b, "STREAM.CREATE.RT", {"name": "RT", "storage": "memory",
                                                         **case})
                config = made.get("config") or {}
                got.append(made.get("error") or config.get("mirror") or config.get("sources"))
                await delete(b, "RT")
            await delete(b, "RO")
            answers.append(got)
        finally:
            await a.close()
            await b.close()
    ours, theirs = answers
    for case, mine, reference in zip(CONFIGS, ours, theirs, strict=True):
        assert mine == reference, case
    assert [answer.get("err_code") for answer in ours[:9]] == [  # type: ignore[union-attr]
        10021, 10021, 10024, 10024, 10052, 10052, 10022, 10140, 10141]
    assert ours[10] == [{"name": "O", "external": {"api": API, "deliver": ""}},
                        {"name": "O", "external": {"api": "$JS.B.API", "deliver": ""}}]


# -- a consumer lost ---------------------------------------------------------------------------------

async def lost_run(server: Server) -> dict[str, Any]:
    """The mirror's consumer deleted on the origin: after its silence, a new one."""
    a, b = await clients(server)
    events: asyncio.Queue[str] = asyncio.Queue()

    async def created(msg: Any) -> None:
        await events.put(msg.subject.rsplit(".", 1)[1])
    try:
        await a.subscribe("$JS.EVENT.ADVISORY.CONSUMER.CREATED.LO.*", cb=created)
        await a.flush()
        await api(a, "STREAM.CREATE.LO", {"name": "LO", "subjects": ["lo"], "storage": "memory"})
        await a.request("lo", b"before")
        await api(b, "STREAM.CREATE.LM", {"name": "LM", "storage": "memory",
                                          "mirror": {"name": "LO", "external": external("dlv.l")}})
        first = await asyncio.wait_for(events.get(), 10)
        await in_step(b, "LM", 1)
        gone = await api(a, f"CONSUMER.DELETE.LO.{first}")
        await a.request("lo", b"meanwhile")
        second = await asyncio.wait_for(events.get(), 40)
        await a.request("lo", b"after")
        info = await in_step(b, "LM", 3)
        copies = [m["data"] for m in await messages(b, "LM")]
        await delete(b, "LM")
        await delete(a, "LO")
        return {"gone": gone.get("success"), "again": second != first,
                "state": info["state"]["messages"], "copies": copies}
    finally:
        await a.close()
        await b.close()


async def test_a_lost_consumer_is_made_again(servers: list[Server]) -> None:
    ours, theirs = await asyncio.gather(*(lost_run(srv) for srv in servers))
    assert ours == theirs
    assert ours["gone"] and ours["again"] and ours["state"] == 3


# -- a restart -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
async def test_file_copies_go_on_after_a_restart_without_copying_twice(
        kind: str, tmp_path: Path) -> None:
    server = start(kind, tmp_path / "store")
    try:
        a, b = await clients(server)
        await api(a, "STREAM.CREATE.FO", {"name": "FO", "subjects": ["fo.>"]})
        await api(b, "STREAM.CREATE.FM", {"name": "FM", "mirror": {
            "name": "FO", "external": external("dlv.fm")}})
        await api(b, "STREAM.CREATE.FS", {"name": "FS", "sources": [{
            "name": "FO", "external": external("dlv.fs")}]})
        for i in range(5):
            await a.request(f"fo.{i}", b"%d" % i)
        await in_step(b, "FM", 5)
        await in_step(b, "FS", 5)
        await a.close()
        await b.close()
        server.restart()
        a, b = await clients(server)
        for i in range(5, 8):
            await a.request(f"fo.{i}", b"%d" % i)
        mirror = await in_step(b, "FM", 8, seconds=30)
        sourced = await in_step(b, "FS", 8, seconds=30)
        assert (mirror["state"]["messages"], sourced["state"]["messages"]) == (8, 8)
        data = [m["data"] for m in await messages(b, "FS")]
        assert data == [base64.b64encode(b"%d" % i).decode() for i in range(8)]
        await a.close()
        await b.close()
    finally:
        server.stop()


# -- a KV bucket mirrored into another account -----------------------------------------------------

async def kv_run(server: Server) -> tuple[bytes, bytes, int]:
    """A bucket of A (made by nats-py's create_key_value), mirrored into B as the clients
    make a KV mirror (nats-py's KeyValueConfig has no mirror: its stream, `KV_<bucket>`
    with the origin's `KV_` stream as mirror and mirror_direct), read back in B with a KV
    get of the mirror bucket (keys under the origin's `$KV.<bucket>.` prefix)."""
    a, b = await clients(server)
    try:
        ja, jb = a.jetstream(), b.jetstream()
        origin = await ja.create_key_value(bucket="CFG", history=5)
        await origin.put("color", b"blue")
        await origin.put("size", b"L")
        await jb.add_stream(StreamConfig(
            name="KV_CFGM", mirror=StreamSource(
                name="KV_CFG", external=ExternalStream(api=API, deliver="dlv.kv")),
            mirror_direct=True, allow_direct=True, allow_rollup_hdrs=True, deny_delete=True,
            discard=DiscardPolicy.NEW, max_msgs_per_subject=5))
        await in_step(b, "KV_CFGM", 2)
        await origin.put("color", b"green")
        await in_step(b, "KV_CFGM", 3)
        mirrored = KeyValue(name="CFG", stream="KV_CFGM", pre="$KV.CFG.", js=jb, direct=True)
        color, size = await mirrored.get("color"), await mirrored.get("size")
        await jb.delete_stream("KV_CFGM")
        await ja.delete_key_value("CFG")
        return color.value or b"", size.value or b"", color.revision or 0
    finally:
        await a.close()
        await b.close()


async def test_a_kv_bucket_mirrored_into_another_account_reads_back(
        servers: list[Server]) -> None:
    ours, theirs = [await kv_run(srv) for srv in servers]
    assert ours == theirs == (b"green", b"L", 3)


# -- an API prefix that leads to something else --------------------------------------------------

FAKE_CONF = """
jetstream: {{ store_dir: "{store}" }}
accounts: {{
  C {{
    users: [{{ user: "c", password: "c" }}]
    exports: [{{ service: "fake.>" }}, {{ stream: "cdlv.>" }}]
  }}
  B {{
    jetstream: enabled
    users: [{{ user: "b", password: "b" }}]
    imports: [
      {{ service: {{ account: "C", subject: "fake.>" }}, to: "$JS.C.API.>" }}
      {{ stream: {{ account: "C", subject: "cdlv.>" }} }}
    ]
  }}
}}
"""
ACK = "$JS.ACK.S.c"


async def fake_run(server: Server) -> dict[str, Any]:
    """B mirrors through an API prefix that a client of C answers: with an answer no
    JetStream gives (both servers show it as the link's error), and with a consumer whose
    deliveries the client would make up: neither server lets a client publish with a
    `$JS.ACK.` reply, so nothing is copied."""
    c = await nats.connect(server.url, user="c", password="c")
    b = await nats.connect(server.url, user="b", password="b")
    asked: asyncio.Queue[str] = asyncio.Queue()

    async def answer(msg: Any) -> None:
        config = json.loads(msg.data)["config"]
        await msg.respond(json.dumps({"name": "c", "config": {
            "deliver_subject": config["deliver_subject"]}, "delivered": {"stream_seq": 0}
            }).encode())
        await asked.put(config["deliver_subject"])

    async def garbage(msg: Any) -> None:
        await msg.respond(b'{"config": [], "delivered": "x"}')
    try:
        await c.subscribe("fake.CONSUMER.CREATE.S", cb=answer)
        await c.subscribe("fake.CONSUMER.CREATE.BAD", cb=garbage)
        await c.flush()
        for name, origin in (("FM", "S"), ("GM", "BAD")):
            await api(b, f"STREAM.CREATE.{name}", {"name": name, "storage": "memory", "mirror": {
                "name": origin, "external": {"api": "$JS.C.API", "deliver": "cdlv"}}})
        deliver = await asyncio.wait_for(asked.get(), 10)

        async def refused() -> Any:
            return (await api(b, "STREAM.INFO.GM"))["mirror"].get("error")
        got: dict[str, Any] = {"bad_answer": await until(refused)}
        await c.publish(deliver, b"forged", reply=f"{ACK}.1.5.1.1700000000000000000.0")
        await c.flush()
        got["forged"] = (await api(b, "STREAM.INFO.FM"))["state"]["messages"]
        got["answers"] = "mirror" in await api(b, "STREAM.INFO.FM")
        await delete(b, "FM", "GM")
        return got
    finally:
        await c.close()
        await b.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_what_no_jetstream_would_answer_or_deliver_is_passed_over(
        kind: str, tmp_path: Path) -> None:
    server = start_configured(kind, FAKE_CONF.format(store=tmp_path), streaming=False)
    try:
        got = await fake_run(server)
        assert got["answers"]
        assert got["bad_answer"] == {"code": 400, "err_code": 10025,
                                     "description": "invalid JSON: {err}"}  # (sic)
        assert got["forged"] == 0
        assert "Traceback" not in server.log()
    finally:
        server.stop()
