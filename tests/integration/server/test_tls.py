"""TLS, each case run on tidings and on the reference nats-server started from the same
configuration file: INFO's TLS keys, nats-py and tidings.client over TLS, TLS first (and its
fall-back), client certificates required and refused, a plain client on a TLS port, a
handshake that never ends, HTTPS monitoring, the configuration's errors and flags, the
subject names verify_and_map gives, and routes over TLS.

Certificates are made at test time (trustme): a CA, a server certificate for 127.0.0.1 and
localhost, a client certificate with an email address, a DNS name and a subject, and one
from another CA.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
import trustme

import tidings.client
from tests.certs import Certs, make_certs, tls_block
from tests.harness import Process, nats_server_binary, start_server_process
from tests.harness.rawnats import RawConn

pytestmark = pytest.mark.timeout(90)

KINDS = ["tidings", "reference"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@dataclass
class Running:
    kind: str
    process: Process
    conf: Path

    @property
    def port(self) -> int:
        return self.process.ports["client"]

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        return self.process.proc

    def log_text(self) -> str:
        return self.process.text()

    def signal_logged(self, sig: int, text: str) -> None:
        """Send `sig`, then wait until `text` is logged."""
        since = self.process.mark()
        self.proc.send_signal(sig)
        self.process.wait_for(re.escape(text), 10, since=since)


def command(kind: str, conf: Path, *flags: str) -> list[str]:
    if kind == "tidings":
        # As a user starts it: with its embedded streaming server (issue 21: TLS with the
        # default streaming stopped the server, and these tests, run without it, missed it).
        return [sys.executable, "-m", "tidings", "server", "-c", str(conf), *flags]
    return [nats_server_binary(), "-c", str(conf), *flags]


_names = itertools.count()


@contextlib.contextmanager
def running(kind: str, tmp_path: Path, body: str, *flags: str) -> Iterator[Running]:
    """A server of `kind` on a configuration file of `body` (its listen line added: any
    port), once its log says it is ready (whether its clients start with TLS or not)."""
    conf = tmp_path / f"{kind}-{next(_names)}.conf"
    conf.write_text(f"listen: 127.0.0.1:-1\n{body}")
    process = start_server_process(kind, "-c", str(conf), *flags, streaming=True)
    try:
        yield Running(kind, process, conf)
    finally:
        process.stop()


def raw_info(port: int) -> tuple[bytes, dict]:
    with RawConn(port) as conn:
        return conn.info_line, conn.info


async def roundtrip(port: int, ctx: ssl.SSLContext, first: bool = False,
                    client: str = "nats-py") -> bytes:
    """A message to ourselves over TLS, with nats-py or tidings.client."""
    connect = nats.connect if client == "nats-py" else tidings.client.connect
    nc = await connect(f"tls://127.0.0.1:{port}", tls=ctx, tls_handshake_first=first,
                       allow_reconnect=False, connect_timeout=3)
    try:
        sub = await nc.subscribe("tls.test")
        await nc.publish("tls.test", b"over tls")
        return (await sub.next_msg(timeout=3)).data
    finally:
        await nc.close()


async def natspy_roundtrip(port: int, ctx: ssl.SSLContext, first: bool = False) -> bytes:
    return await roundtrip(port, ctx, first)


async def tidings_roundtrip(port: int, ctx: ssl.SSLContext, first: bool = False) -> bytes:
    return await roundtrip(port, ctx, first, client="tidings.client")


# -- INFO -------------------------------------------------------------------------------------
def test_info_keys_match_the_reference(certs: Certs, tmp_path: Path) -> None:
    """tls_required (and tls_verify with verify) in INFO, where the reference puts them."""
    orders = {}
    for verify in (False, True):
        for kind in KINDS:
            body = tls_block(certs, "  verify: true\n" if verify else "")
            with running(kind, tmp_path, body) as server:
                line, info = raw_info(server.port)
            assert line.endswith(b" \r\n"), kind
            assert info["tls_required"] is True, kind
            assert info.get("tls_verify") is (True if verify else None), kind
            orders[kind, verify] = [k for k in json.loads(line[5:]) if k in (
                "headers", "auth_required", "tls_required", "tls_verify", "max_payload",
                "client_id")]
        assert orders["tidings", verify] == orders["reference", verify]


# -- clients over TLS ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
async def test_natspy_and_tidings_client_over_tls(kind: str, certs: Certs, tmp_path: Path) -> None:
    with running(kind, tmp_path, tls_block(certs)) as server:
        assert await natspy_roundtrip(server.port, certs.context()) == b"over tls"
        assert await tidings_roundtrip(server.port, certs.context()) == b"over tls"


@pytest.mark.parametrize("kind", KINDS)
async def test_tls_first(kind: str, certs: Certs, tmp_path: Path) -> None:
    """handshake_first: TLS at once, INFO over TLS; a client waiting for INFO in the clear
    gets nothing and is closed after the TLS timeout."""
    body = tls_block(certs, "  handshake_first: true\n  timeout: 1\n")
    with running(kind, tmp_path, body) as server:
        assert await natspy_roundtrip(server.port, certs.context(), first=True) == b"over tls"
        assert await tidings_roundtrip(server.port, certs.context(), first=True) == b"over tls"
        with RawConn(server.port, read_info=False) as plain:
            assert plain.read_to_eof(timeout=5) == b""


@pytest.mark.parametrize("kind", KINDS)
async def test_tls_first_falls_back_to_plain_info(kind: str, certs: Certs,
                                                  tmp_path: Path) -> None:
    """handshake_first: "300ms": a client that says nothing gets INFO in the clear after
    that long (still tls_required, TLS after it), one that starts TLS gets TLS first."""
    body = tls_block(certs, '  handshake_first: "300ms"\n')
    with running(kind, tmp_path, body) as server:
        started = time.monotonic()
        with RawConn(server.port) as plain:
            assert plain.info["tls_required"] is True
        assert time.monotonic() - started >= 0.25
        assert await natspy_roundtrip(server.port, certs.context(), first=True) == b"over tls"
        assert await natspy_roundtrip(server.port, certs.context()) == b"over tls"


# -- client certificates --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
async def test_client_certificates_required(kind: str, certs: Certs, tmp_path: Path) -> None:
    body = tls_block(certs, "  verify: true\n")
    with running(kind, tmp_path, body) as server:
        assert await natspy_roundtrip(server.port, certs.context(client_cert=True)) \
            == b"over tls"
        for refused in (certs.context(), certs.context(other=True)):
            with pytest.raises(Exception):  # noqa: B017 - nats-py words it its own way
                await natspy_roundtrip(server.port, refused)
        # The refusals are logged as errors: no certificate, one of another CA.
        await asyncio.to_thread(server.process.wait_for, "TLS handshake error", 5, 0, 2)
        errors = [line for line in server.log_text().splitlines()
                  if "TLS handshake error" in line]
        assert len(errors) >= 2 and all("[ERR]" in line for line in errors), errors


# -- what a wrong peer gets ------------------------------------------------------------------------
def test_plain_client_on_a_tls_port_gets_what_the_reference_gives(certs: Certs,
                                                                  tmp_path: Path) -> None:
    """INFO, then CONNECT in the clear: the handshake fails on it, the connection closes
    without a byte more (the reference logs it at debug level only)."""
    answers = {}
    for kind in KINDS:
        with running(kind, tmp_path, tls_block(certs), "-D") as server:
            with RawConn(server.port) as conn:
                conn.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
                answers[kind] = conn.read_to_eof()
            server.process.wait_for("first record does not look like a TLS handshake", 5)
    assert answers["tidings"] == answers["reference"] == b""


@pytest.mark.parametrize("kind", KINDS)
async def test_stalled_handshake_is_closed_after_the_timeout(kind: str, certs: Certs,
                                                             tmp_path: Path) -> None:
    """A socket that never starts TLS, and one that sends half a ClientHello, are closed
    after the TLS timeout (1 s), and nothing is sent on them; meanwhile another client keeps
    getting its PONGs."""
    body = tls_block(certs, "  timeout: 1\n")
    with running(kind, tmp_path, body) as server:
        started = time.monotonic()

        async def stalled(send: bytes) -> tuple[bytes, float]:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            await reader.readline()  # INFO
            writer.write(send)
            rest = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return rest, time.monotonic() - started

        waiting = [asyncio.ensure_future(stalled(b"")),
                   asyncio.ensure_future(stalled(bytes.fromhex("160301020001")))]
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        await reader.readline()
        # The healthy client upgrades after INFO, as the tidings and nats-py clients do.
        await writer.start_tls(certs.context(), server_hostname="127.0.0.1")
        writer.write(b'CONNECT {"verbose":false}\r\n')
        pongs = 0
        while not all(w.done() for w in waiting) or pongs < 2:
            writer.write(b"PING\r\n")
            assert await asyncio.wait_for(reader.readline(), 5) == b"PONG\r\n"
            pongs += 1
        for rest, elapsed in [w.result() for w in waiting]:
            assert rest == b""
            assert 0.8 <= elapsed < 6, elapsed
        writer.write(b"PING\r\n")
        assert await asyncio.wait_for(reader.readline(), 5) == b"PONG\r\n"
        writer.close()


# -- monitoring ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_https_monitoring(kind: str, certs: Certs, tmp_path: Path) -> None:
    """/varz over HTTPS on https_port; with TLS the auth timeout defaults to the TLS
    timeout (2 s) and one second, as the reference's."""
    with running(kind, tmp_path, tls_block(certs) + "https_port: -1\n") as server:
        https = server.process.ports["https"]  # any free port: the one its log names
        url = f"https://127.0.0.1:{https}/varz"
        with urllib.request.urlopen(url, context=certs.context(), timeout=5) as resp:
            varz = json.loads(resp.read())
    assert varz["tls_required"] is True
    assert varz["https_port"] == -1  # as configured (the reference's too)
    assert (varz["auth_timeout"], varz["tls_timeout"]) == (3, 2)
    with pytest.raises(OSError):  # not plain HTTP
        urllib.request.urlopen(f"http://127.0.0.1:{https}/varz", timeout=5)


# -- the configuration -----------------------------------------------------------------------------
def run_config(kind: str, conf: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(kind, conf, *flags), capture_output=True, text=True,
                          timeout=30)


@pytest.mark.parametrize("case, expected", [
    ('  cert_file: "{missing}"\n  key_file: "{key}"\n',
     ["error parsing X509 certificate/key pair", "no such file or directory", ":2:1:"]),
    ('  cert_file: "{cert}"\n  key_file: "{key}"\n  bogus: 1\n',
     ['unknown field "bogus"', ":5:3:"]),
    ('  cert_file: "{cert}"\n', ["missing 'key_file' in TLS configuration"]),
    ('  cert_file: "{cert}"\n  key_file: "{key}"\n  handshake_first: "soon"\n',
     ['field "handshake_first"\'s value "soon" is invalid']),
])
def test_configuration_errors_as_the_reference(case: str, expected: list[str], certs: Certs,
                                               tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    block = case.format(missing=tmp_path / "nope.pem", cert=certs.server, key=certs.server_key)
    conf.write_text(f"listen: 127.0.0.1:-1\ntls {{\n{block}}}\n")
    for kind in KINDS:
        done = run_config(kind, conf)
        assert done.returncode == 1, (kind, done.stderr)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in done.stderr, (kind, done.stderr)
        for text in expected:
            assert text in lines[0], (kind, lines[0])


def test_tls_flags(certs: Certs, tmp_path: Path) -> None:
    """--tls --tlscert --tlskey (and --tlsverify --tlscacert) as the reference's; a missing
    key is refused in its words."""
    conf = tmp_path / "empty.conf"
    conf.write_text("")
    for kind in KINDS:
        done = run_config(kind, conf, "--tls", "--tlscert", certs.server)
        assert done.returncode == 1
        assert "TLS Server private key must be present and valid" in done.stderr, kind
        flags = ["--tlsverify", "--tlscert", certs.server, "--tlskey", certs.server_key,
                 "--tlscacert", certs.ca]
        with running(kind, tmp_path, "", *flags) as server:
            _, info = raw_info(server.port)
            assert (info["tls_required"], info["tls_verify"]) == (True, True), kind


# -- verify_and_map: the names the reference tries -------------------------------------------------
def _tricky_client_cert(d: Path, ca: trustme.CA) -> tuple[str, str]:
    """A certificate whose subject is in no order Go's would write, with domain components
    and a value to escape: CN first, then DCs, O twice, OU, C."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([
        x509.NameAttribute(NameOID.COMMON_NAME, "Bob, Jr."),
        x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "example"),
        x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "com"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme Labs"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "#ops"),
        x509.NameAttribute(NameOID.COUNTRY_NAME, "NL"),
    ])
    issuer_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    issuer_key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), None)
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(issuer_key, hashes.SHA256()))  # type: ignore[arg-type]
    (d / "tricky.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "tricky-key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return str(d / "tricky.pem"), str(d / "tricky-key.pem")


async def test_verify_and_map_names_are_those_the_reference_tries(tmp_path: Path) -> None:
    """certificate_identities' subject names, given to the reference as its only user, let
    that certificate in, by the reference's literal subject match (its log says which)."""
    from tidings.server.tls import certificate_identities

    ca = trustme.CA()
    ca.cert_pem.write_to_path(tmp_path / "ca.pem")
    server = ca.issue_cert("127.0.0.1")
    server.cert_chain_pems[0].write_to_path(tmp_path / "s.pem")
    server.private_key_pem.write_to_path(tmp_path / "s-key.pem")
    cert, key = _tricky_client_cert(tmp_path, ca)
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    ctx.load_cert_chain(cert, key)
    peercert = ssl._ssl._test_decode_cert(cert)  # type: ignore[attr-defined]
    names = certificate_identities(peercert)
    assert names == ["CN=Bob\\, Jr.,OU=\\#ops,O=Acme+O=Acme Labs,C=NL,DC=example,DC=com",
                     "CN=Bob\\, Jr.,OU=\\#ops,O=Acme+O=Acme Labs,C=NL"]
    for name, how in zip(names, ("Using RDNSequence for auth", "Using certificate subject"),
                         strict=True):
        body = (f'tls {{\n  cert_file: "{tmp_path}/s.pem"\n  key_file: "{tmp_path}/s-key.pem"\n'
                f'  ca_file: "{tmp_path}/ca.pem"\n  verify_and_map: true\n}}\n'
                f"authorization {{ users = [ {{user: {json.dumps(name)}}} ] }}\n")
        with running("reference", tmp_path, body, "-D") as ref:
            assert await natspy_roundtrip(ref.port, ctx) == b"over tls"
            assert how in ref.log_text()


# -- routes ----------------------------------------------------------------------------------------
def cluster_body(certs: Certs, peer_port: int | None = None) -> str:
    """A TLS cluster block listening on any port, routed to `peer_port` if given."""
    routes = f'  routes: ["nats://127.0.0.1:{peer_port}"]\n' if peer_port else ""
    return ("cluster {\n  name: tls_cluster\n  listen: 127.0.0.1:-1\n" + routes
            + "  " + tls_block(certs, "  timeout: 2\n").replace("\n", "\n  ") + "}\n")


async def message_crosses(pub_port: int, sub_port: int) -> bool:
    """Whether a message published on one server reaches a subscriber on the other (the
    route may take a moment to be made: published again until it arrives)."""
    a = await nats.connect(f"nats://127.0.0.1:{pub_port}")
    b = await nats.connect(f"nats://127.0.0.1:{sub_port}")
    try:
        sub = await b.subscribe("over.route")
        await b.flush()
        for _ in range(100):
            await a.publish("over.route", b"routed")
            await a.flush()
            try:
                return (await sub.next_msg(timeout=0.2)).data == b"routed"
            except nats.errors.TimeoutError:
                continue
        return False
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("peer", ["tidings", "reference"])
async def test_routes_over_tls(peer: str, certs: Certs, tmp_path: Path) -> None:
    """A TLS cluster of tidings and `peer`: messages cross both ways; the route port speaks
    TLS first, with a verified client certificate, and its INFO says tls_required and
    tls_verify."""
    # `peer` routes to tidings (a route carries both ways once made).
    with running("tidings", tmp_path, cluster_body(certs)) as one, \
            running(peer, tmp_path, cluster_body(certs, one.process.ports["route"])) as two:
        assert await message_crosses(one.port, two.port)
        assert await message_crosses(two.port, one.port)
        for route_port in (one.process.ports["route"], two.process.ports["route"]):
            with socket.create_connection(("127.0.0.1", route_port), timeout=5) as s:
                with certs.context(client_cert=True).wrap_socket(
                        s, server_hostname="127.0.0.1") as t:
                    line = t.recv(65536)
            info = json.loads(line[5:line.index(b"\r\n")])
            assert (info["tls_required"], info["tls_verify"]) == (True, True)


@pytest.mark.parametrize("kind", KINDS)
async def test_verify_and_map_logs_in_as_the_certificate_user(kind: str, certs: Certs,
                                                              tmp_path: Path) -> None:
    """The client certificate's email names the user, whose permissions then hold; a
    certificate that names nobody (same CA) is refused."""
    body = (tls_block(certs, "  verify_and_map: true\n")
            + 'authorization { users = [\n'
              '  {user: "alice@example.com", permissions: {publish: "tls.>", subscribe: "tls.>"}}\n'
              '  {user: "CN=nobody"}\n] }\n')
    with running(kind, tmp_path, body) as server:
        assert await natspy_roundtrip(server.port, certs.context(client_cert=True)) == b"over tls"
        errors: list[Exception] = []
        refused = asyncio.Event()

        async def on_error(exc: Exception) -> None:
            errors.append(exc)
            refused.set()

        nc = await nats.connect(f"tls://127.0.0.1:{server.port}", error_cb=on_error,
                                tls=certs.context(client_cert=True), allow_reconnect=False)
        await nc.publish("elsewhere", b"x")
        await nc.flush()
        await asyncio.wait_for(refused.wait(), 5)
        assert 'permissions violation for publish to "elsewhere"' in str(errors[0]).lower()
        await nc.close()
    unnamed = ('authorization { users = [ {user: "bob@example.com"} ] }\n')
    with running(kind, tmp_path, tls_block(certs, "  verify_and_map: true\n") + unnamed) as server:
        with pytest.raises(Exception, match="Authorization Violation"):
            await nats.connect(f"tls://127.0.0.1:{server.port}", allow_reconnect=False,
                               tls=certs.context(client_cert=True), max_reconnect_attempts=0)


async def test_reload_takes_a_new_certificate(tmp_path: Path) -> None:
    """SIGHUP with a new certificate in the same files: new handshakes get it, connections
    made before stay."""
    import signal

    old_ca, new_ca = trustme.CA(), trustme.CA()
    old_ca.cert_pem.write_to_path(tmp_path / "old-ca.pem")
    new_ca.cert_pem.write_to_path(tmp_path / "new-ca.pem")

    def install(ca: trustme.CA) -> None:
        cert = ca.issue_cert("127.0.0.1")
        cert.cert_chain_pems[0].write_to_path(tmp_path / "cert.pem")
        cert.private_key_pem.write_to_path(tmp_path / "key.pem")

    install(old_ca)
    body = (f'tls {{\n  cert_file: "{tmp_path}/cert.pem"\n  key_file: "{tmp_path}/key.pem"\n}}\n')
    with running("tidings", tmp_path, body) as server:
        trusting_old = ssl.create_default_context(cafile=str(tmp_path / "old-ca.pem"))
        trusting_new = ssl.create_default_context(cafile=str(tmp_path / "new-ca.pem"))
        before = await nats.connect(f"tls://127.0.0.1:{server.port}", tls=trusting_old,
                                    allow_reconnect=False)
        install(new_ca)
        await asyncio.to_thread(server.signal_logged, signal.SIGHUP,
                                "Reloaded server configuration")
        assert await roundtrip(server.port, trusting_new) == b"over tls"
        with pytest.raises((ssl.SSLError, OSError, nats.errors.Error)):
            await roundtrip(server.port, trusting_old)
        await before.flush(timeout=5)  # the connection made before is still served
        await before.close()


async def test_max_connections_refused_before_the_handshake(certs: Certs,
                                                            tmp_path: Path) -> None:
    """INFO, then the refusal in the clear, as the reference sends them (it does in most
    runs; now and then it resets the connection before they are read)."""
    with running("tidings", tmp_path, "max_connections: 1\n" + tls_block(certs)) as server:
        first = await nats.connect(f"tls://127.0.0.1:{server.port}", tls=certs.context(),
                                   allow_reconnect=False)
        try:
            await first.flush()
            with RawConn(server.port) as second:
                assert second.read_to_eof() == b"-ERR 'maximum connections exceeded'\r\n"
        finally:
            await first.close()


# -- allow_non_tls: TLS and plain clients on one port -------------------------------------------
NON_TLS = "allow_non_tls: true\n"
INFO_KEYS = ("headers", "auth_required", "tls_required", "tls_verify", "tls_available",
             "max_payload", "client_id")


def info_order(line: bytes) -> list[str]:
    return [k for k in json.loads(line[5:]) if k in INFO_KEYS]


def test_allow_non_tls_info_as_the_reference(certs: Certs, tmp_path: Path) -> None:
    """With allow_non_tls, INFO offers TLS (tls_available) instead of requiring it, in the
    reference's place among the keys, and the start-up log says TLS is available."""
    orders = {}
    for verify in (False, True):
        for kind in KINDS:
            body = tls_block(certs, "  verify: true\n" if verify else "") + NON_TLS
            with running(kind, tmp_path, body) as server:
                line, info = raw_info(server.port)
                log = server.log_text()
            assert "tls_required" not in info, (kind, info)
            assert info["tls_available"] is True, kind
            assert info.get("tls_verify") is (True if verify else None), kind
            assert "TLS available for client connections" in log, (kind, log)
            orders[kind, verify] = info_order(line)
        assert orders["tidings", verify] == orders["reference", verify]


def tls_ping(port: int, ctx: ssl.SSLContext) -> tuple[socket.socket, bytes]:
    """INFO in the clear, then TLS on the same socket, CONNECT and PING: (the TLS socket,
    what came back)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    line = b""
    while not line.endswith(b"\r\n"):
        line += sock.recv(1)
    assert line.startswith(b"INFO "), line
    tls = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
    tls.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
    return tls, tls.recv(64)


def connz_tls_versions(monitor: int) -> list[str | None]:
    with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/connz", timeout=5) as resp:
        conns = json.loads(resp.read())["connections"]
    return sorted((c.get("tls_version") or "") for c in conns)


@pytest.mark.parametrize("kind", KINDS)
async def test_allow_non_tls_serves_tls_and_plain_clients(kind: str, certs: Certs,
                                                          tmp_path: Path) -> None:
    """One port, both kinds of client: the server tells a TLS ClientHello from a plain
    CONNECT by the first byte. nats-py and tidings.client in the clear, tidings.client over
    TLS (it upgrades when INFO says tls_available), a raw socket each way; /connz shows
    which connection is TLS."""
    body = tls_block(certs) + NON_TLS + "http_port: -1\n"
    with running(kind, tmp_path, body) as server:
        monitor = server.process.ports["http"]
        nc = await nats.connect(f"nats://127.0.0.1:{server.port}", allow_reconnect=False)
        try:
            sub = await nc.subscribe("plain")
            await nc.publish("plain", b"in the clear")
            assert (await sub.next_msg(timeout=3)).data == b"in the clear"
        finally:
            await nc.close()
        tc = await tidings.client.connect(f"nats://127.0.0.1:{server.port}",
                                          allow_reconnect=False)
        try:
            sub = await tc.subscribe("plain")
            await tc.publish("plain", b"tidings in the clear")
            assert (await sub.next_msg(timeout=3)).data == b"tidings in the clear"
        finally:
            await tc.close()
        assert await tidings_roundtrip(server.port, certs.context()) == b"over tls"
        with RawConn(server.port) as plain:
            assert "tls_required" not in plain.info
            plain.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
            assert plain.read_line() == b"PONG\r\n"
            secure, answer = tls_ping(server.port, certs.context())
            try:
                assert answer == b"PONG\r\n"
                versions = connz_tls_versions(monitor)
            finally:
                secure.close()
        assert len(versions) == 2 and versions[0] == "" and versions[1].startswith("1."), \
            versions


@pytest.mark.parametrize("kind", KINDS)
async def test_allow_non_tls_with_tls_first_fallback(kind: str, certs: Certs,
                                                     tmp_path: Path) -> None:
    """handshake_first with a fall-back delay and allow_non_tls: a client that starts TLS at
    once gets INFO over TLS saying tls_required; one that waits gets INFO in the clear
    offering TLS, and may then go on in the clear (nats-py both ways)."""
    body = tls_block(certs, '  handshake_first: "300ms"\n') + NON_TLS
    with running(kind, tmp_path, body) as server:
        with RawConn(server.port) as plain:
            assert "tls_required" not in plain.info
            assert plain.info["tls_available"] is True
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            with certs.context().wrap_socket(sock, server_hostname="127.0.0.1") as tls:
                line = tls.recv(4096)
        info = json.loads(line[5:])
        assert (info["tls_required"], info["tls_available"]) == (True, True), info
        assert await natspy_roundtrip(server.port, certs.context(), first=True) == b"over tls"
        nc = await nats.connect(f"nats://127.0.0.1:{server.port}", allow_reconnect=False)
        try:
            await nc.flush(timeout=5)
        finally:
            await nc.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_allow_non_tls_does_not_open_tls_first_only(kind: str, certs: Certs,
                                                          tmp_path: Path) -> None:
    """handshake_first without a fall-back requires the handshake: allow_non_tls does not
    let a plain client in (it gets no INFO and is closed after the TLS timeout)."""
    body = tls_block(certs, "  handshake_first: true\n  timeout: 1\n") + NON_TLS
    with running(kind, tmp_path, body) as server:
        assert await natspy_roundtrip(server.port, certs.context(), first=True) == b"over tls"
        with RawConn(server.port, read_info=False) as plain:
            plain.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
            assert plain.read_to_eof(timeout=5) == b""


def test_allow_non_tls_is_a_top_level_key(certs: Certs, tmp_path: Path) -> None:
    """Inside the tls block, allow_non_tls is an unknown field to both servers."""
    conf = tmp_path / "inside.conf"
    conf.write_text("listen: 127.0.0.1:-1\n"
                    + tls_block(certs, "  allow_non_tls: true\n"))
    for kind in KINDS:
        done = run_config(kind, conf)
        assert done.returncode == 1, (kind, done.stderr)
        assert 'unknown field "allow_non_tls"' in done.stderr, (kind, done.stderr)


@pytest.mark.parametrize("non_tls", [False, True], ids=["tls", "allow_non_tls"])
def test_websocket_info_has_its_own_listener_tls(non_tls: bool, certs: Certs,
                                                 tmp_path: Path) -> None:
    """With TLS on the client port and a plain WebSocket listener (no_tls), a WebSocket
    client's INFO neither requires nor offers TLS: it says what its own listener has, as the
    reference's (tls_verify stays, from the client port)."""
    from tests.harness.wsframes import RawWebSocket

    infos = {}
    for kind in KINDS:
        body = (tls_block(certs, "  verify: true\n") + (NON_TLS if non_tls else "")
                + "websocket {\n  listen: 127.0.0.1:-1\n  no_tls: true\n}\n")
        with running(kind, tmp_path, body) as server:
            with RawWebSocket(server.process.ports["websocket"]) as ws:
                infos[kind] = {k: ws.info.get(k) for k in INFO_KEYS if k != "client_id"}
    assert infos["tidings"] == infos["reference"]
    assert infos["tidings"]["tls_required"] is None and infos["tidings"]["tls_available"] is None


@pytest.mark.parametrize("kind", KINDS)
async def test_reload_does_not_change_allow_non_tls(kind: str, certs: Certs,
                                                    tmp_path: Path) -> None:
    """allow_non_tls is fixed while running: a reload that changes it is refused with the
    reference's message, and plain clients are still let in."""
    import signal

    with running(kind, tmp_path, tls_block(certs) + NON_TLS) as server:
        server.conf.write_text(server.conf.read_text().replace(NON_TLS, ""))
        refusal = "config reload not supported for AllowNonTLS: old=true, new=false"
        await asyncio.to_thread(server.signal_logged, signal.SIGHUP, refusal)
        with RawConn(server.port) as plain:
            plain.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
            assert plain.read_line() == b"PONG\r\n"
