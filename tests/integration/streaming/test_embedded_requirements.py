"""The embedded streaming server under everything the core can require of clients.

`tidings server` is started as a user starts it (streaming on, its defaults), with one
requirement of the core at a time: TLS (from the file and from the flags), client
certificates, verify_and_map, users with permissions, NKeys, a token, a short auth timeout,
max_connections. The embedded streaming server must start and serve under each without the
user configuring anything for it (it is joined to the core in memory: Server.dial_internal),
and a streaming client that meets the requirement publishes and receives through it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import nkeys
import pytest

from tests.certs import Certs, make_certs, tls_block
from tests.harness import Process, tidings_command
from tidings.streaming.client import connect as stan_connect

pytestmark = pytest.mark.timeout(90)

READY = "Streaming server ready"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@dataclass
class Case:
    conf: str  # the configuration file ("" for none)
    flags: list[str]
    client: dict[str, Any]  # how a client meets the requirement (nats connect options)


def _nkey_user() -> tuple[str, str]:
    kp = nkeys.from_seed(nkeys.encode_seed(b"\x11" * 32, nkeys.PREFIX_BYTE_USER))
    return kp.public_key.decode(), kp.seed.decode()


def case(name: str, certs: Certs) -> Case:
    tls = {"tls": certs.context()}
    mtls = {"tls": certs.context(client_cert=True)}
    narrow = ('default_permissions { publish: "app.>", subscribe: "app.>" }\n'
              '  users: [ {user: admin, password: pw, permissions: '
              '{publish: ">", subscribe: ">"}} ]')
    public, seed = _nkey_user()
    return {
        "tls": Case(tls_block(certs), [], tls),
        "tls_verify": Case(tls_block(certs, "  verify: true\n"), [], mtls),
        "tls_verify_and_map": Case(
            tls_block(certs, "  verify_and_map: true\n")
            + 'authorization { users: [ {user: "alice@example.com"} ] }\n', [], mtls),
        "tls_flags": Case("", ["--tls", "--tlscert", str(certs.server), "--tlskey",
                               str(certs.server_key)], tls),
        "users_with_permissions": Case(f"authorization {{\n  {narrow}\n}}\n", [],
                                       {"user": "admin", "password": "pw"}),
        "nkeys": Case(f'authorization {{ users: [ {{nkey: "{public}"}} ] }}\n', [],
                      {"nkeys_seed_str": seed}),
        "token": Case("authorization { token: s3cret }\n", [], {"token": "s3cret"}),
        "auth_timeout": Case("authorization { user: a, password: b, timeout: 0.2 }\n", [],
                             {"user": "a", "password": "b"}),
        "max_connections": Case("max_connections: 1\n", [], {}),
        # Too small for any streaming client, but the server and its streaming start.
        "tiny_limits": Case("max_payload: 64\nmax_control_line: 96\n", [], {}),
    }[name]


@pytest.fixture
def server(request: pytest.FixtureRequest, certs: Certs, tmp_path: Path) -> Iterator[Any]:
    c = case(request.param, certs)
    cmd = tidings_command("server", "-a", "127.0.0.1", "-p", "-1", *c.flags)
    if c.conf:
        conf = tmp_path / "server.conf"
        conf.write_text(c.conf)
        cmd += ["-c", str(conf)]
    server = Process(cmd, kind="tidings")
    try:
        # The embedded streaming server's start is logged, not announced on any port.
        server.wait_for(re.escape(READY), 30)
        yield server.ports["client"], c.client, server.proc, server
    finally:
        server.stop()


@pytest.mark.parametrize("server", ["tiny_limits"], indirect=True)
async def test_client_limits_do_not_bound_the_embedded_streaming_server(server: Any) -> None:
    """max_payload and max_control_line bound clients; the streaming server's own
    connection (a longer CONNECT, deliveries larger than what was published) starts and
    the core serves clients within the limits."""
    port, _, proc, log = server
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        assert (await reader.readline()).startswith(b"INFO ")
        # (a raw client: nats-py's CONNECT alone is longer than 96 bytes)
        writer.write(b"CONNECT {}\r\nSUB a 1\r\nPUB a 64\r\n" + b"x" * 64 + b"\r\nPING\r\n")
        assert await asyncio.wait_for(reader.readline(), 5) == b"+OK\r\n"  # CONNECT
        assert await asyncio.wait_for(reader.readline(), 5) == b"+OK\r\n"  # SUB
        assert await asyncio.wait_for(reader.readline(), 5) == b"+OK\r\n"  # PUB
        assert await asyncio.wait_for(reader.readline(), 5) == b"MSG a 1 64\r\n"
        assert await asyncio.wait_for(reader.readline(), 5) == b"x" * 64 + b"\r\n"
    finally:
        writer.close()
    assert proc.poll() is None and "error" not in log.text().lower()


CASES = ["tls", "tls_verify", "tls_verify_and_map", "tls_flags", "users_with_permissions",
         "nkeys", "token", "auth_timeout", "max_connections"]


@pytest.mark.parametrize("server", CASES, indirect=True)
async def test_embedded_streaming_serves_under_the_requirement(server: Any) -> None:
    port, client_opts, proc, log = server
    scheme = "tls" if "tls" in client_opts else "nats"
    sc = await stan_connect("test-cluster", "req-client", url=f"{scheme}://127.0.0.1:{port}",
                            connect_timeout=10, **client_opts)
    try:
        for i in range(3):
            await sc.publish("app.orders", b"order %d" % i)
        got: list[bytes] = []
        done = asyncio.Event()

        async def on_msg(msg: Any) -> None:
            got.append(msg.data)
            if len(got) == 3:
                done.set()

        await sc.subscribe("app.orders", cb=on_msg, deliver_all_available=True)
        await asyncio.wait_for(done.wait(), 10)
        assert got == [b"order 0", b"order 1", b"order 2"]
    finally:
        await sc.close()
    assert proc.poll() is None
    assert "error" not in log.text().lower()


@pytest.mark.parametrize("kind", ["tidings", "reference"])
def test_the_internal_client_is_not_counted_or_traced(kind: str, tmp_path: Path) -> None:
    """/varz counts what clients sent (nats.py's own suite publishes 100 messages and reads
    in_msgs 100), and -V traces the clients: the embedded streaming server's own requests
    and subscriptions are neither, as the reference's internal clients are not."""
    import json
    import time
    import urllib.request

    from tests.harness import start_server_process

    server = start_server_process(kind, "-a", "127.0.0.1", "-p", "-1", "-m", "-1", "-V",
                                  streaming=True)
    port, http = server.ports["client"], server.ports["http"]
    try:

        async def publish() -> None:
            nc = await nats.connect(f"nats://127.0.0.1:{port}")
            for i in range(100):
                await nc.publish("counted", b"%d" % i)
            await nc.flush()
            await nc.close()

        asyncio.run(publish())

        def counts() -> tuple[int, int]:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=10) as r:
                varz = json.loads(r.read())
            return varz["in_msgs"], varz["out_msgs"]

        # (the reference adds a closed client's counts to /varz a moment later: polled)
        deadline = time.monotonic() + 10
        while counts() != (100, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert counts() == (100, 0), kind
        assert "_STAN" not in server.text()
    finally:
        server.stop()
