"""Credentials for CONNECT: user/password, token, nkey seed, and JWT creds files.

nkey and JWT authentication sign the server's INFO `nonce` with the user's nkey seed (Ed25519,
via the `nkeys` package) and send the signature base64url-encoded without padding.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InvalidUserCredentialsError

SignatureCallback = Callable[[str], bytes]
JWTCallback = Callable[[], "bytes | str"]


def _read_text(source: str | Path) -> str:
    return Path(source).expanduser().read_text()


def parse_creds(text: str) -> tuple[str, bytes]:
    """The user JWT and nkey seed from a .creds file (`-----BEGIN ... JWT-----` blocks)."""
    jwt = seed = None
    lines = [ln.strip() for ln in text.splitlines()]
    for i, line in enumerate(lines):
        if line.startswith("-----BEGIN") and i + 1 < len(lines):
            value = lines[i + 1]
            if "JWT" in line and jwt is None:
                jwt = value
            elif "SEED" in line and seed is None:
                seed = value.encode()
    if not jwt or not seed:
        raise InvalidUserCredentialsError("creds file holds no JWT or no seed")
    return jwt, seed


def _seed_from(value: str | bytes) -> bytes:
    seed = value.encode() if isinstance(value, str) else value
    seed = seed.strip()
    if not seed.startswith(b"S"):
        raise InvalidUserCredentialsError("not an nkey seed")
    return seed


def sign_nonce(seed: bytes, nonce: str) -> str:
    import nkeys

    try:
        kp = nkeys.from_seed(bytearray(seed))
        sig = kp.sign(nonce.encode())
    except Exception as exc:
        raise InvalidUserCredentialsError(str(exc)) from exc
    return base64.urlsafe_b64encode(sig).rstrip(b"=").decode()


def public_key(seed: bytes) -> str:
    import nkeys

    try:
        return nkeys.from_seed(bytearray(seed)).public_key.decode()
    except Exception as exc:
        raise InvalidUserCredentialsError(str(exc)) from exc


@dataclass
class Credentials:
    user: str | None = None
    password: str | None = None
    token: str | None = None
    nkey_seed: bytes | None = None
    jwt: str | None = None
    signature_cb: SignatureCallback | None = None
    user_jwt_cb: JWTCallback | None = None

    @classmethod
    def build(
        cls,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        nkeys_seed: str | Path | None = None,
        nkeys_seed_str: str | None = None,
        user_credentials: str | Path | None = None,
        signature_cb: SignatureCallback | None = None,
        user_jwt_cb: JWTCallback | None = None,
    ) -> Credentials:
        creds = cls(user=user, password=password, token=token,
                    signature_cb=signature_cb, user_jwt_cb=user_jwt_cb)
        if user_credentials is not None:
            try:
                text = _read_text(user_credentials)
            except OSError as exc:
                raise InvalidUserCredentialsError(str(exc)) from exc
            creds.jwt, creds.nkey_seed = parse_creds(text)
        elif nkeys_seed_str is not None:
            creds.nkey_seed = _seed_from(nkeys_seed_str)
        elif nkeys_seed is not None:
            try:
                creds.nkey_seed = _seed_from(_read_text(nkeys_seed))
            except OSError as exc:
                raise InvalidUserCredentialsError(str(exc)) from exc
        return creds

    def connect_fields(self, info: dict[str, Any], url_user: str | None,
                       url_password: str | None) -> dict[str, Any]:
        """Auth fields for CONNECT, given the server's INFO and any user info in the URL."""
        out: dict[str, Any] = {}
        nonce = info.get("nonce")
        jwt = self.jwt
        if self.user_jwt_cb is not None:
            got = self.user_jwt_cb()
            jwt = got.decode() if isinstance(got, bytes) else got
        if jwt:
            out["jwt"] = jwt
        if self.nkey_seed is not None:
            if not jwt:
                out["nkey"] = public_key(self.nkey_seed)
            if nonce:
                out["sig"] = sign_nonce(self.nkey_seed, nonce)
        elif self.signature_cb is not None and nonce:
            out["sig"] = base64.urlsafe_b64encode(self.signature_cb(nonce)).rstrip(b"=").decode()
        user = self.user if self.user is not None else url_user
        password = self.password if self.password is not None else url_password
        if user is not None and password is not None:
            out["user"] = user
            out["pass"] = password
        elif self.token is not None:
            out["auth_token"] = self.token
        elif user is not None:
            out["auth_token"] = user  # nats://token@host
        return out
