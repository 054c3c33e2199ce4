"""The WebSocket listener (`websocket { }`), on tidings and on the reference nats-server started
from the same configuration file: nats-py and tidings.client over ws:// talking to TCP clients,
the HTTP checks of the upgrade and their statuses, origins, compression, limits, close frames,
a WebSocket client that stops reading, wss://, and the configuration errors."""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import nats
import pytest
from nats.aio.client import Client as NATS

import tidings.client
import tidings.turns
from tests.harness import Process, nats_server_binary, start_server_process
from tests.messaging import synced

pytestmark = pytest.mark.timeout(60)

KINDS = ["tidings", "reference"]
GOOD_ORIGIN = "http://good.example:8080"


@dataclass
class WsServer:
    kind: str
    process: Process

    @property
    def port(self) -> int:
        return self.process.ports["client"]

    @property
    def ws_port(self) -> int:
        return self.process.ports["websocket"]

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        return self.process.proc

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.ws_port}"

    def log_text(self) -> str:
        return self.process.text()

    def stop(self) -> None:
        self.process.stop()


def command(kind: str, conf: Path) -> list[str]:
    if kind == "tidings":
        return [sys.executable, "-m", "tidings", "server", "-c", str(conf)]  # streaming on
    return [nats_server_binary(), "-c", str(conf)]


_names = itertools.count()


def start(kind: str, tmp: Path, ws_block: str, top: str = "") -> WsServer:
    """A server of `kind` with a WebSocket listener (`ws_block`), both on ports of its own."""
    conf = tmp / f"{kind}-{next(_names)}.conf"
    conf.write_text(f"listen: 127.0.0.1:-1\n{top}\n"
                    f"websocket {{\n  listen: 127.0.0.1:-1\n{ws_block}\n}}\n")
    return WsServer(kind, start_server_process(kind, "-c", str(conf), streaming=True))


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, WsServer]]:
    """One server of each kind: no TLS, compression on, one allowed origin."""
    tmp = tmp_path_factory.mktemp("ws")
    block = f'  no_tls: true\n  compression: true\n  allowed_origins: ["{GOOD_ORIGIN}"]'
    running = {kind: start(kind, tmp, block) for kind in KINDS}
    yield running
    for server in running.values():
        server.stop()


@pytest.fixture(params=KINDS)
def server(request: pytest.FixtureRequest, servers: dict[str, WsServer]) -> WsServer:
    return servers[request.param]


async def natspy(url: str) -> NATS:
    return await nats.connect(url, allow_reconnect=False, connect_timeout=5)


async def ws_session(url: str, **kw: object) -> tuple[aiohttp.ClientSession,
                                                        aiohttp.ClientWebSocketResponse]:
    session = aiohttp.ClientSession()
    try:
        ws = await session.ws_connect(url, **kw)  # type: ignore[arg-type]
    except BaseException:
        await session.close()
        raise
    return session, ws


async def frame(ws: aiohttp.ClientWebSocketResponse) -> aiohttp.WSMessage:
    return await asyncio.wait_for(ws.receive(), 5)


async def read_until(ws: aiohttp.ClientWebSocketResponse, want: bytes) -> bytes:
    """The bytes of the binary frames up to and including `want`."""
    got = b""
    while want not in got:
        msg = await frame(ws)
        assert msg.type == aiohttp.WSMsgType.BINARY, (msg.type, msg.data, got[-200:])
        got += msg.data
    return got


def http(port: int, request: bytes) -> tuple[int, bytes]:
    """Send a raw HTTP request; the status and the head of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ", 2)[1]), data


KEY = b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
UPGRADE = b"Upgrade: websocket\r\nConnection: Upgrade\r\n"


# -- messages between the transports ------------------------------------------------------------
async def test_natspy_ws_and_tcp_talk_both_ways(server: WsServer) -> None:
    ws, tcp = await natspy(server.ws_url), await natspy(server.url)
    try:
        from_ws = await tcp.subscribe("to.tcp")
        from_tcp = await ws.subscribe("to.ws")
        await synced(tcp)
        await synced(ws)
        await ws.publish("to.tcp", b"over websocket", headers={"X-Kind": "ws"})
        await tcp.publish("to.ws", b"over tcp", headers={"X-Kind": "tcp"})
        got = await from_ws.next_msg(timeout=5)
        assert (got.data, got.headers) == (b"over websocket", {"X-Kind": "ws"})
        got = await from_tcp.next_msg(timeout=5)
        assert (got.data, got.headers) == (b"over tcp", {"X-Kind": "tcp"})
    finally:
        await ws.close()
        await tcp.close()


async def test_request_reply_across_transports(server: WsServer) -> None:
    ws, tcp = await natspy(server.ws_url), await natspy(server.url)
    try:
        async def on_ws(msg: nats.aio.msg.Msg) -> None:
            await msg.respond(b"ws answers " + msg.data)

        async def on_tcp(msg: nats.aio.msg.Msg) -> None:
            await msg.respond(b"tcp answers " + msg.data)

        await ws.subscribe("svc.ws", cb=on_ws)
        await tcp.subscribe("svc.tcp", cb=on_tcp)
        await synced(ws)
        await synced(tcp)
        assert (await tcp.request("svc.ws", b"q1", timeout=5)).data == b"ws answers q1"
        assert (await ws.request("svc.tcp", b"q2", timeout=5)).data == b"tcp answers q2"
    finally:
        await ws.close()
        await tcp.close()


async def test_payload_near_max_payload(server: WsServer) -> None:
    ws, tcp = await natspy(server.ws_url), await natspy(server.url)
    try:
        assert ws.max_payload == 1024 * 1024
        big = bytes(range(256)) * ((ws.max_payload - 1024) // 256)
        to_tcp = await tcp.subscribe("big.tcp")
        to_ws = await ws.subscribe("big.ws")
        await synced(tcp)
        await synced(ws)
        await ws.publish("big.tcp", big)
        await tcp.publish("big.ws", big[::-1])
        assert (await to_tcp.next_msg(timeout=10)).data == big
        assert (await to_ws.next_msg(timeout=10)).data == big[::-1]
    finally:
        await ws.close()
        await tcp.close()


@pytest.mark.parametrize("budget", ["normal", "spent"])
async def test_tidings_client_over_ws(server: WsServer, budget: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """tidings.client over ws:// both ways. With every read over its turn's input budget (as
    on a busy machine) the client pauses its WebSocket transport after each frame and resumes
    on the next turn, losing nothing (the transport once had no pause_reading, and the
    connection died of it)."""
    if budget == "spent":
        monkeypatch.setattr(tidings.turns, "INPUT_BUDGET", -1.0)
    ws = await tidings.client.connect(server.ws_url, allow_reconnect=False)
    tcp = await natspy(server.url)
    try:
        sub = await ws.subscribe("tc.>")
        await ws.flush()
        for i in range(500):
            await tcp.publish(f"tc.{i}", str(i).encode() * 50)
        await tcp.flush()
        got = [(await sub.next_msg(timeout=5)).data for _ in range(500)]
        assert got == [str(i).encode() * 50 for i in range(500)]
        tcp_sub = await tcp.subscribe("back")
        await synced(tcp)
        await ws.publish("back", b"from tidings.client")
        assert (await tcp_sub.next_msg(timeout=5)).data == b"from tidings.client"
    finally:
        await ws.close()
        await tcp.close()


# -- what a WebSocket client is told ------------------------------------------------------------
async def test_info_names_the_websocket_listener(server: WsServer) -> None:
    session, ws = await ws_session(server.ws_url)
    try:
        msg = await frame(ws)
        assert msg.type == aiohttp.WSMsgType.BINARY and msg.data.startswith(b"INFO ")
        info = json.loads(msg.data[5:])
        assert (info["host"], info["port"]) == ("127.0.0.1", server.ws_port)
        assert "tls_required" not in info and info["max_payload"] == 1024 * 1024
        # The protocol on top is the same as over TCP, text frames included.
        await ws.send_str('CONNECT {"verbose":true}\r\nPING\r\n')
        assert await read_until(ws, b"PONG\r\n") == b"+OK\r\nPONG\r\n"
    finally:
        await ws.close()
        await session.close()


async def test_max_payload_violation_closes_with_1009(server: WsServer) -> None:
    session, ws = await ws_session(server.ws_url)
    try:
        await frame(ws)  # INFO
        size = 1024 * 1024 + 1
        await ws.send_bytes(b'CONNECT {"verbose":false}\r\nPUB too.big %d\r\n' % size)
        assert await read_until(ws, b"\r\n") == b"-ERR 'Maximum Payload Violation'\r\n"
        msg = await frame(ws)
        assert msg.type == aiohttp.WSMsgType.CLOSE
        assert (msg.data, msg.extra) == (1009, "Maximum Message Payload Exceeded")
    finally:
        await ws.close()
        await session.close()


async def test_ping_frames_get_pongs(server: WsServer) -> None:
    session, ws = await ws_session(server.ws_url, autoping=False)
    try:
        await frame(ws)  # INFO
        await ws.ping(b"are you there")
        msg = await frame(ws)
        assert (msg.type, msg.data) == (aiohttp.WSMsgType.PONG, b"are you there")
    finally:
        await ws.close()
        await session.close()


async def test_client_close_frame_is_answered(server: WsServer) -> None:
    session, ws = await ws_session(server.ws_url)
    try:
        await frame(ws)  # INFO
        await asyncio.wait_for(ws.close(code=1000, message=b"bye"), 5)
        assert ws.closed and ws.close_code == 1000
    finally:
        await session.close()


# -- the HTTP side ------------------------------------------------------------------------------
@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n" + UPGRADE + KEY
     + b"Sec-WebSocket-Version: 13\r\n\r\n", 405),
    (b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n" + KEY
     + b"Sec-WebSocket-Version: 13\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\n" + UPGRADE + b"Sec-WebSocket-Version: 13\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\n" + UPGRADE + b"Sec-WebSocket-Key: abc\r\n"
     b"Sec-WebSocket-Version: 13\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\n" + UPGRADE + KEY + b"Sec-WebSocket-Version: 8\r\n\r\n",
     400),
    (b"GET /mqtt HTTP/1.1\r\nHost: x\r\n" + UPGRADE + KEY
     + b"Sec-WebSocket-Version: 13\r\n\r\n", 404),
    (b"GET / HTTP/1.1\r\nHost: x\r\n" + UPGRADE + KEY
     + b"Sec-WebSocket-Version: 13\r\nOrigin: http://bad.example\r\n\r\n", 403),
    (b"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: WebSocket\r\n"
     + KEY + b"Sec-WebSocket-Version: 13\r\nOrigin: " + GOOD_ORIGIN.encode() + b"\r\n\r\n",
     101),
], ids=["not-upgrade", "post", "no-connection", "no-key", "bad-key", "version", "mqtt",
        "bad-origin", "good-origin"])
def test_http_checks(server: WsServer, request_bytes: bytes, status: int) -> None:
    got, head = http(server.ws_port, request_bytes)
    assert got == status, head
    if status != 101:
        assert b"\r\nSec-WebSocket-Version: 13\r\n" in head.replace(b"Websocket", b"WebSocket")


async def test_origin_not_in_the_allowed_list_is_refused(server: WsServer) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await ws_session(server.ws_url, headers={"Origin": "http://good.example:8081"})
    assert refused.value.status == 403
    session, ws = await ws_session(server.ws_url, headers={"Origin": GOOD_ORIGIN})
    try:
        assert (await frame(ws)).data.startswith(b"INFO ")
    finally:
        await ws.close()
        await session.close()


async def test_compression_when_the_client_asks(server: WsServer) -> None:
    session, ws = await ws_session(server.ws_url, compress=15)
    tcp = await natspy(server.url)
    try:
        assert "permessage-deflate" in ws._response.headers.get("Sec-WebSocket-Extensions", "")
        await frame(ws)  # INFO
        payload = b"compressible " * 5000
        sub = await tcp.subscribe("zip")
        await synced(tcp)
        await ws.send_bytes(b'CONNECT {"verbose":false}\r\nSUB zip.back 1\r\n'
                            b"PUB zip %d\r\n%b\r\nPING\r\n" % (len(payload), payload))
        await read_until(ws, b"PONG\r\n")
        assert (await sub.next_msg(timeout=5)).data == payload
        await tcp.publish("zip.back", payload)
        got = await read_until(ws, payload + b"\r\n")
        assert got == b"MSG zip.back 1 %d\r\n%b\r\n" % (len(payload), payload)
    finally:
        await ws.close()
        await session.close()
        await tcp.close()


async def test_no_compression_unless_asked(server: WsServer) -> None:
    session, ws = await ws_session(server.ws_url, compress=0)
    try:
        assert "Sec-WebSocket-Extensions" not in ws._response.headers
    finally:
        await ws.close()
        await session.close()


# -- a WebSocket client that stops reading ------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
async def test_stuck_ws_reader_is_a_slow_consumer(kind: str, tmp_path: Path) -> None:
    srv = start(kind, tmp_path, "  no_tls: true", top="max_pending: 256KB\nmax_payload: 64KB")
    try:
        # The stuck reader: subscribes, then never reads again.
        session, stuck = await ws_session(srv.ws_url, max_msg_size=0)
        await frame(stuck)
        await stuck.send_bytes(b'CONNECT {"verbose":false}\r\nSUB flood 1\r\nPING\r\n')
        await read_until(stuck, b"PONG\r\n")
        tcp, other = await natspy(srv.url), await natspy(srv.url)

        async def echo(msg: nats.aio.msg.Msg) -> None:
            await msg.respond(msg.data)

        await other.subscribe("echo", cb=echo)
        await synced(other)
        chunk = b"x" * 32 * 1024
        for _ in range(2000):  # 64 MB: far more than the socket buffers and max_pending
            await tcp.publish("flood", chunk)
        await tcp.flush(timeout=20)
        # The TCP side is unharmed: still connected, and a request through the server works.
        assert tcp.is_connected and other.is_connected
        assert (await tcp.request("echo", b"still here", timeout=5)).data == b"still here"
        # The stuck reader was cut off: reading on, it finds its connection closed before
        # all the messages it had subscribed to.
        received = 0
        while True:
            msg = await asyncio.wait_for(stuck.receive(), 10)
            if msg.type != aiohttp.WSMsgType.BINARY:
                break
            received += msg.data.count(b"MSG flood 1 ")
        assert received < 2000
        assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED,
                            aiohttp.WSMsgType.ERROR, aiohttp.WSMsgType.CLOSING)
        await tcp.close()
        await other.close()
        await stuck.close()
        await session.close()
    finally:
        srv.stop()
    assert "slow consumer" in srv.log_text().lower()


# -- shutdown -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
async def test_shutdown_sends_going_away(kind: str, tmp_path: Path) -> None:
    srv = start(kind, tmp_path, "  no_tls: true")
    session, ws = await ws_session(srv.ws_url)
    try:
        await frame(ws)  # INFO
        await ws.send_bytes(b'CONNECT {"verbose":false}\r\nPING\r\n')
        await read_until(ws, b"PONG\r\n")
        srv.proc.send_signal(signal.SIGTERM)
        msg = await frame(ws)
        assert (msg.type, msg.data, msg.extra) == (aiohttp.WSMsgType.CLOSE, 1001,
                                                   "Server Shutdown")
    finally:
        await ws.close()
        await session.close()
        srv.stop()


# -- wss:// ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
async def test_wss_with_certificates_made_now(kind: str, tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    block = f'  tls {{\n    cert_file: "{cert_file}"\n    key_file: "{key_file}"\n  }}'
    srv = start(kind, tmp_path, block)
    context = ssl.create_default_context()
    ca.configure_trust(context)
    try:
        wss = await nats.connect(f"wss://127.0.0.1:{srv.ws_port}", tls=context,
                                 allow_reconnect=False, connect_timeout=5)
        tcp = await natspy(srv.url)
        try:
            assert wss._server_info.get("tls_required") is True
            sub = await tcp.subscribe("secure")
            await synced(tcp)
            await wss.publish("secure", b"over wss")
            assert (await sub.next_msg(timeout=5)).data == b"over wss"
        finally:
            await wss.close()
            await tcp.close()
    finally:
        srv.stop()
    assert f"Listening for websocket clients on wss://127.0.0.1:{srv.ws_port}" in \
        srv.log_text()


# -- the configuration ----------------------------------------------------------------------------
@pytest.mark.parametrize(("block", "error"), [
    ("port: -1", "websocket requires TLS configuration"),
    ('port: -1, no_tls: true, allowed_origins: ["foo"]',
     'unable to parse allowed origin: parse "foo": invalid URI for request'),
    ('port: -1, no_tls: true, allowed_origins: ["ftp://x.example"]',
     'unable to parse allowed origin "ftp://x.example": allowed origins must be absolute '
     "URLs with http or https scheme"),
    ('port: -1, no_tls: true, allowed_origins: ["http://"]',
     'unable to parse allowed origin "http://": host is required'),
    ("port: -1, no_tls: true, bogus: 1", 'unknown field "bogus"'),
    ("port: -1, no_tls: true, handshake_timeout: true",
     "error parsing handshake timeout: unsupported type bool"),
], ids=["no-tls", "origin-uri", "origin-scheme", "origin-host", "unknown", "timeout-type"])
@pytest.mark.parametrize("kind", KINDS)
def test_configuration_errors(kind: str, block: str, error: str, tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text(f"listen: 127.0.0.1:-1\nwebsocket {{ {block} }}\n")
    out = subprocess.run(command(kind, conf), capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert error in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_ws_listener_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ws_port = taken.getsockname()[1]
        conf = tmp_path / "busy.conf"
        conf.write_text(f"listen: 127.0.0.1:-1\n"
                        f"websocket {{ listen: 127.0.0.1:{ws_port}, no_tls: true }}\n")
        for kind in KINDS:
            out = subprocess.run(command(kind, conf), capture_output=True, text=True,
                                 timeout=30)
            assert out.returncode != 0, kind
            assert "Unable to listen for websocket connections" in out.stderr, out.stderr


@pytest.mark.serial  # a reader that keeps up with 6.4 MB: not beside other tests' load
@pytest.mark.parametrize("kind", KINDS)
async def test_ws_reader_keeping_up_gets_a_burst_bigger_than_max_pending(
        kind: str, tmp_path: Path) -> None:
    srv = start(kind, tmp_path, "  no_tls: true", top="max_pending: 256KB\nmax_payload: 64KB")
    try:
        ws, tcp = await natspy(srv.ws_url), await natspy(srv.url)
        try:
            sub = await ws.subscribe("burst")
            await synced(ws)
            chunk = b"y" * 16 * 1024
            # 6.4 MB in bursts of 1 MB, four times max_pending each. The reader shares this
            # event loop with the publisher, so each burst is read before the next is sent:
            # a reader that cannot run at all for a whole burst is not one that keeps up.
            for _ in range(6):
                for _ in range(64):
                    await tcp.publish("burst", chunk)
                await tcp.flush(timeout=20)
                for _ in range(64):
                    assert (await sub.next_msg(timeout=10)).data == chunk
            assert ws.is_connected
        finally:
            await ws.close()
            await tcp.close()
    finally:
        srv.stop()
    assert "slow consumer" not in srv.log_text().lower()


@pytest.mark.parametrize("kind", KINDS)
async def test_websocket_authorization_of_its_own(kind: str, tmp_path: Path) -> None:
    """The websocket block's authorization holds for WebSocket clients only (INFO says
    so to them); TCP clients of a server without auth need none."""
    block = "  no_tls: true\n  authorization { user: web, password: pw, timeout: 1 }"
    server = start(kind, tmp_path, block)
    try:
        tcp = await natspy(server.url)
        host = server.ws_url.removeprefix("ws://")
        web = await natspy(f"ws://web:pw@{host}")
        sub = await tcp.subscribe("from.web")
        await synced(tcp)
        await web.publish("from.web", b"hello")
        assert (await sub.next_msg(timeout=5)).data == b"hello"
        await web.close()
        await tcp.close()
        with pytest.raises(Exception, match="Authorization Violation"):
            await nats.connect(f"ws://web:nope@{host}", allow_reconnect=False,
                               max_reconnect_attempts=0, connect_timeout=5)
        session, ws = await ws_session(server.ws_url)
        try:
            info = (await frame(ws)).data
            assert b'"auth_required":true' in info, kind
            # no CONNECT within the websocket block's own timeout (1 s)
            assert b"Authentication Timeout" in await read_until(ws, b"Authentication Timeout")
        finally:
            await ws.close()
            await session.close()
    finally:
        server.stop()
