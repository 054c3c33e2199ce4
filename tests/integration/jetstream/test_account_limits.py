"""An account's JetStream limits (`jetstream { max_mem, max_file, max_streams, ... }` in
`accounts`), the JetStream domain (`$JS.<domain>.API`), and each account's API counts, on
tidings and on the reference nats-server with the same configuration file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from tests.harness import Server, start_configured
from tests.integration.jetstream.conftest import KINDS

CONF = """
jetstream: {{ store_dir: "{store}", domain: "hub" }}
no_auth_user: "a"
accounts: {{
  A {{
    users: [{{ user: "a" }}]
    jetstream: {{ max_mem: 64MB, max_file: 32MB, max_streams: 3, max_consumers: 2,
                  max_ack_pending: 100, memory_max_stream_bytes: 2048,
                  store_max_stream_bytes: 4096, max_stream_bytes: true }}
  }}
  B {{ users: [{{ user: "b", password: "b" }}], jetstream: enabled }}
}}
"""


@pytest.fixture(scope="module", params=KINDS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    store: Path = tmp_path_factory.mktemp("jsl")
    srv = start_configured(request.param, CONF.format(store=store), streaming=False)
    yield srv
    srv.stop()


async def api(nc: Client, subject: str, body: dict[str, Any] | None = None,
              prefix: str = "$JS.API") -> dict[str, Any]:
    msg = await nc.request(f"{prefix}.{subject}", json.dumps(body or {}).encode(), timeout=5)
    return json.loads(msg.data)


def stream(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "subjects": [name.lower()], **extra}


async def test_an_accounts_limits_are_enforced_and_reported(server: Server) -> None:
    nc = await nats.connect(server.url)
    try:
        refused = [
            (stream("L1"), 10113),  # max_stream_bytes: a max_bytes is required
            (stream("L1", max_bytes=65536), 10122),  # above store_max_stream_bytes
            (stream("L1", max_bytes=128, max_consumers=5), 10026),  # above max_consumers
        ]
        for config, code in refused:
            got = await api(nc, "STREAM.CREATE.L1", config)
            assert got["error"]["err_code"] == code, got
        assert (await api(nc, "STREAM.CREATE.L1", stream("L1", max_bytes=128)))["config"][
            "max_bytes"] == 128
        for i in range(2, 4):
            await api(nc, f"STREAM.CREATE.L{i}", stream(f"L{i}", max_bytes=128))
        fourth = await api(nc, "STREAM.CREATE.L4", stream("L4", max_bytes=128))
        assert fourth["error"]["err_code"] == 10027  # max_streams
        consumer = await api(nc, "CONSUMER.CREATE.L1.c1", {
            "stream_name": "L1", "config": {"name": "c1", "ack_policy": "explicit"}})
        assert consumer["config"]["max_ack_pending"] == 100  # the account's, not 1000
        too_many = await api(nc, "CONSUMER.CREATE.L1.c2", {
            "stream_name": "L1", "config": {"name": "c2", "ack_policy": "explicit",
                                            "max_ack_pending": 500}})
        assert too_many["error"]["err_code"] == 10121
        await api(nc, "CONSUMER.CREATE.L1.c3", {"stream_name": "L1", "config": {"name": "c3"}})
        third = await api(nc, "CONSUMER.CREATE.L1.c4", {"stream_name": "L1",
                                                        "config": {"name": "c4"}})
        assert third["error"]["err_code"] == 10026  # the account's max_consumers, per stream
        info = await api(nc, "INFO")
        assert info["limits"] == {
            "max_memory": 64 << 20, "max_storage": 32 << 20, "max_streams": 3,
            "max_consumers": 2, "max_ack_pending": 100, "memory_max_stream_bytes": 2048,
            "storage_max_stream_bytes": 4096, "max_bytes_required": True}
        assert (info["streams"], info["consumers"], info["domain"]) == (3, 2, "hub")
        assert (info["api"]["total"], info["api"]["errors"]) == (11, 6)
        # Through the domain's prefix, as a client of another domain asks.
        named = await api(nc, "STREAM.INFO.L1", prefix="$JS.hub.API")
        assert named["config"]["name"] == "L1"
    finally:
        await nc.close()


async def test_another_account_has_none_of_those_limits(server: Server) -> None:
    nc = await nats.connect(server.url, user="b", password="b")
    try:
        created = await api(nc, "STREAM.CREATE.FREE", stream("FREE"))
        assert created["config"]["max_bytes"] == -1
        info = await api(nc, "INFO")
        assert info["limits"]["max_streams"] == -1 and info["streams"] == 1
        assert info["api"]["total"] == 1  # A's requests are A's
    finally:
        await nc.close()


IMPORT_CONF = """
jetstream: {{ store_dir: "{store}" }}
accounts: {{
  JS {{ jetstream: enabled, users: [{{ user: "js", password: "js" }}],
        exports: [{{ stream: "A.>", accounts: ["A"] }}] }}
  A {{ users: [{{ user: "a", password: "a" }}],
       imports: [{{ stream: {{ subject: "A.>", account: "JS" }} }}] }}
}}
"""


@pytest.mark.parametrize("kind", KINDS)
async def test_a_push_consumer_is_bound_once_the_importer_subscribes(
        kind: str, tmp_path: Path) -> None:
    srv = start_configured(kind, IMPORT_CONF.format(store=tmp_path), streaming=False)
    admin = await nats.connect(srv.url, user="js", password="js")
    other = await nats.connect(srv.url, user="a", password="a")
    try:
        await api(admin, "STREAM.CREATE.X", stream("X"))
        consumer = {"stream_name": "X", "config": {"durable_name": "p",
                                                   "deliver_subject": "A.inbox"}}
        created = await api(admin, "CONSUMER.DURABLE.CREATE.X.p", consumer)
        assert "push_bound" not in created  # the import alone is no subscriber
        sub = await other.subscribe("A.inbox")
        await other.flush()
        assert (await api(admin, "CONSUMER.INFO.X.p")).get("push_bound") is True
        await admin.publish("x", b"through the import")
        msg = await sub.next_msg(5)
        assert msg.data == b"through the import"
    finally:
        await admin.close()
        await other.close()
        srv.stop()


@pytest.mark.parametrize("kind", KINDS)
async def test_an_account_jwt_enables_jetstream_with_its_tier(kind: str, tmp_path: Path) -> None:
    """Operator mode: an account whose JWT has JetStream limits (here tiered, R1) has
    JetStream, with them in its account info's tiers; one without has none."""
    from tests.harness.jwts import (
        Key,
        account_jwt,
        operator_config,
        operator_jwt,
        user_jwt,
        write_creds,
    )

    operator, system, with_js, without = (Key.new("operator"), Key.new("account"),
                                          Key.new("account"), Key.new("account"))
    (tmp_path / "op.jwt").write_text(operator_jwt(operator, system_account=system.public))
    accounts = {
        system.public: account_jwt(system, operator),
        with_js.public: account_jwt(with_js, operator, limits={"tiered_limits": {
            "R1": {"disk_storage": 1 << 20, "streams": -1, "consumer": -1}}}),
        without.public: account_jwt(without, operator)}
    conf = operator_config(tmp_path / "op.jwt", accounts,
                           f'jetstream: {{ store_dir: "{tmp_path / "js"}" }}')
    srv = start_configured(kind, conf, streaming=False)
    creds = []
    for account in (with_js, without):
        user = Key.new("user")
        creds.append(write_creds(tmp_path / f"{user.public}.creds",
                                 user_jwt(user, account), user))
    try:
        nc = await nats.connect(srv.url, user_credentials=str(creds[0]))
        info = await api(nc, "INFO")
        tier = info["tiers"]["R1"]["limits"]
        assert (tier["max_storage"], tier["max_streams"], tier["max_ack_pending"]) == (
            1 << 20, -1, -1)
        await nc.close()
        nc = await nats.connect(srv.url, user_credentials=str(creds[1]))
        refused = await api(nc, "INFO")
        assert refused["error"]["err_code"] == 10039  # not enabled for the account
        await nc.close()
    finally:
        srv.stop()


async def test_one_jetstream_server_serves_the_clients_of_its_cluster(tmp_path: Path) -> None:
    """tidings with JetStream and a tidings without it, in one cluster: a client of the
    second uses the first's JetStream (API, publishes, pulls and acks travel over routes)."""
    from tests.harness import start_tidings

    first = start_tidings(extra_args=["--no_streaming", "-js", "-sd", str(tmp_path)],
                          cluster=True, streaming=False)
    second = start_tidings(extra_args=["--no_streaming"], cluster=True, routes=[first],
                           streaming=False)
    try:
        nc = await nats.connect(second.url)
        js = nc.jetstream()
        for _ in range(100):  # (until the route carries the first's interest)
            try:
                await js.account_info()
                break
            except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError):
                await asyncio.sleep(0.1)
        await js.add_stream(name="FAR", subjects=["far"])
        assert (await js.publish("far", b"over the route")).seq == 1
        sub = await js.pull_subscribe("far", durable="d")
        (msg,) = await sub.fetch(1, timeout=5)
        assert msg.data == b"over the route"
        assert await msg.ack_sync()
        assert (await js.consumer_info("FAR", "d")).ack_floor.stream_seq == 1
        await nc.close()
    finally:
        second.stop()
        first.stop()
