"""Authentication, TLS and WebSocket transports.

User/password and token run against both servers. nkeys, TLS and WebSocket run against the
reference nats-server only: the tidings server does not offer them (yet).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from pathlib import Path

import nkeys
import pytest

import tidings.client
from tests.harness import start_configured, start_reference
from tidings.client import errors

from .conftest import Cert, Servers


async def _roundtrip(nc: tidings.client.Client, subject: str = "auth.ok") -> bytes:
    sub = await nc.subscribe(subject)
    await nc.publish(subject, b"hello")
    return (await sub.next_msg(5)).data


async def test_user_password(servers: Servers) -> None:
    server = servers.start(user="alice", password="s3cret")
    nc = await tidings.client.connect(server.url, user="alice", password="s3cret")
    try:
        assert await _roundtrip(nc) == b"hello"
    finally:
        await nc.close()
    nc = await tidings.client.connect(f"nats://alice:s3cret@127.0.0.1:{server.port}")
    try:
        assert await _roundtrip(nc) == b"hello"
    finally:
        await nc.close()


async def test_wrong_password_is_a_typed_error(servers: Servers) -> None:
    server = servers.start(user="alice", password="s3cret")
    with pytest.raises(errors.AuthorizationError):
        await tidings.client.connect(server.url, user="alice", password="nope")
    with pytest.raises(errors.AuthorizationError):
        await tidings.client.connect(server.url)


async def test_token(servers: Servers) -> None:
    server = servers.start(token="t0ken")
    nc = await tidings.client.connect(server.url, token="t0ken")
    try:
        assert await _roundtrip(nc) == b"hello"
    finally:
        await nc.close()
    nc = await tidings.client.connect(f"nats://t0ken@127.0.0.1:{server.port}")
    try:
        assert await _roundtrip(nc) == b"hello"
    finally:
        await nc.close()
    with pytest.raises(errors.AuthorizationError):
        await tidings.client.connect(server.url, token="wrong")


@pytest.fixture
def user_seed() -> bytes:
    return nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)


async def test_nkey_seed(user_seed: bytes, tmp_path: object) -> None:
    public = nkeys.from_seed(bytearray(user_seed)).public_key.decode()
    server = start_reference(authorization=f"{{ users = [ {{ nkey: {public} }} ] }}")
    try:
        nc = await tidings.client.connect(server.url, nkeys_seed_str=user_seed.decode())
        try:
            assert await _roundtrip(nc) == b"hello"
        finally:
            await nc.close()
        other = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
        with pytest.raises(errors.AuthorizationError):
            await tidings.client.connect(server.url, nkeys_seed_str=other.decode())
    finally:
        server.stop()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _keypair(prefix: int) -> tuple[bytes, nkeys.KeyPair]:
    seed = nkeys.encode_seed(os.urandom(32), prefix)
    return seed, nkeys.from_seed(bytearray(seed))


def _jwt(issuer: nkeys.KeyPair, subject: str, name: str, nats: dict[str, object]) -> str:
    """A NATS v2 JWT: ed25519-nkey signature by the issuer over header.claims."""
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    claims = {"jti": "", "iat": int(time.time()), "iss": issuer.public_key.decode(),
              "name": name, "sub": subject, "nats": nats}
    claims["jti"] = base64.b32encode(
        hashlib.sha256(json.dumps(claims).encode()).digest()).decode().rstrip("=")
    body = _b64(json.dumps(claims).encode())
    return f"{header}.{body}.{_b64(issuer.sign(f'{header}.{body}'.encode()))}"


def _creds(user_jwt: str, seed: bytes) -> str:
    return (f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{seed.decode()}\n------END USER NKEY SEED------\n")


async def test_jwt_creds_file(tmp_path: Path) -> None:
    _, operator = _keypair(nkeys.PREFIX_BYTE_OPERATOR)
    _, account = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    _, stranger = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)  # not known to the server
    user_seed, user = _keypair(nkeys.PREFIX_BYTE_USER)
    limits = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
              "wildcards": True, "conn": -1, "leaf": -1}
    op_jwt = _jwt(operator, operator.public_key.decode(), "op",
                  {"type": "operator", "version": 2})
    acc_jwt = _jwt(operator, account.public_key.decode(), "acc",
                   {"limits": limits, "default_permissions": {"pub": {}, "sub": {}},
                    "type": "account", "version": 2})
    user_claims = {"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
                   "type": "user", "version": 2}
    good = tmp_path / "user.creds"
    good.write_text(_creds(_jwt(account, user.public_key.decode(), "u", user_claims), user_seed))
    bad = tmp_path / "stranger.creds"
    bad.write_text(_creds(_jwt(stranger, user.public_key.decode(), "u", user_claims), user_seed))
    server = start_configured(
        "reference", f'operator: "{op_jwt}"\nresolver: MEMORY\n'
        f'resolver_preload: {{ {account.public_key.decode()}: "{acc_jwt}" }}\n'
    )
    try:
        nc = await tidings.client.connect(server.url, user_credentials=str(good))
        try:
            assert await _roundtrip(nc) == b"hello"
        finally:
            await nc.close()
        with pytest.raises(errors.AuthorizationError):
            await tidings.client.connect(server.url, user_credentials=str(bad))
        with pytest.raises(errors.InvalidUserCredentialsError):
            await tidings.client.connect(server.url, user_credentials=str(tmp_path / "none"))
    finally:
        server.stop()


def _tls_block(cert: Cert, extra: str = "") -> str:
    return f'{{ cert_file: "{cert.cert}", key_file: "{cert.key}"{extra} }}'


async def test_tls_upgrade_after_info(tls_cert: Cert) -> None:
    server = start_reference(tls=_tls_block(tls_cert))
    try:
        nc = await tidings.client.connect(server.url, tls=tls_cert.client_context())
        try:
            assert await _roundtrip(nc) == b"hello"
        finally:
            await nc.close()
        # tls:// asks for TLS; without our CA the certificate is refused.
        with pytest.raises((errors.SecureConnFailedError, errors.NoServersError)):
            await tidings.client.connect(f"tls://127.0.0.1:{server.port}")
    finally:
        server.stop()


async def test_tls_handshake_first(tls_cert: Cert) -> None:
    server = start_configured("reference",
                              "tls: " + _tls_block(tls_cert, ", handshake_first: true"))
    try:
        nc = await tidings.client.connect(
            server.url, tls=tls_cert.client_context(), tls_handshake_first=True
        )
        try:
            assert await _roundtrip(nc) == b"hello"
        finally:
            await nc.close()
        # Waiting for INFO in clear text gets nothing from this server.
        with pytest.raises(errors.NoServersError):
            await tidings.client.connect(
                server.url, tls=tls_cert.client_context(), connect_timeout=0.5
            )
    finally:
        server.stop()


async def test_tls_wanted_but_not_offered(any_server: object) -> None:
    import ssl

    ctx = ssl.create_default_context()
    with pytest.raises(errors.SecureConnWantedError):
        await tidings.client.connect(any_server.url, tls=ctx)  # type: ignore[attr-defined]


async def test_websocket() -> None:
    server = start_reference(websocket='{ listen: "127.0.0.1:-1", no_tls: true }')
    ws_port = server.ports["websocket"]
    try:
        nc = await tidings.client.connect(f"ws://127.0.0.1:{ws_port}")
        tcp = await tidings.client.connect(server.url)
        try:
            assert await _roundtrip(nc) == b"hello"
            # Both transports meet on the same server.
            sub = await nc.subscribe("ws.cross")
            await nc.flush()
            big = os.urandom(200_000)
            await tcp.publish("ws.cross", big)
            assert (await sub.next_msg(5)).data == big
            async def pong(msg: tidings.client.Msg) -> None:
                await msg.respond(b"pong")

            await tcp.subscribe("ws.svc", cb=pong)
            await tcp.flush()
            assert (await nc.request("ws.svc", b"ping", timeout=5)).data == b"pong"
        finally:
            await nc.close()
            await tcp.close()
    finally:
        server.stop()


async def test_secure_websocket(tls_cert: Cert) -> None:
    server = start_reference(
        websocket=f'{{ listen: "127.0.0.1:-1", tls: {_tls_block(tls_cert)} }}'
    )
    ws_port = server.ports["websocket"]
    try:
        nc = await tidings.client.connect(
            f"wss://127.0.0.1:{ws_port}", tls=tls_cert.client_context()
        )
        try:
            assert await _roundtrip(nc) == b"hello"
        finally:
            await nc.close()
    finally:
        server.stop()
