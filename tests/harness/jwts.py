"""NKeys and NATS JWTs for operator-mode tests, minted with tidings.config.jwt's encoder:
`Key.new("operator" | "account" | "user")`, `operator_jwt`, `account_jwt`, `user_jwt`
(the reference library's defaults: an account and a user unlimited unless a limit is given),
`write_creds` (a `.creds` file for nats-py's `user_credentials=`), and `operator_config`
(a nats-server configuration trusting the operator, its accounts preloaded in memory).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys

from tidings.config.jwt import encode, format_creds

_PREFIXES = {"operator": nkeys.PREFIX_BYTE_OPERATOR, "account": nkeys.PREFIX_BYTE_ACCOUNT,
             "user": nkeys.PREFIX_BYTE_USER}
# As the reference library's NewAccountClaims / NewUserClaims.
UNLIMITED_ACCOUNT = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                     "wildcards": True, "conn": -1, "leaf": -1}
UNLIMITED_USER = {"subs": -1, "data": -1, "payload": -1}


@dataclass(frozen=True)
class Key:
    """An NKey: its seed ("S...") and public key ("O...", "A...", "U...")."""

    seed: str
    public: str

    @classmethod
    def new(cls, kind: str) -> Key:
        seed = nkeys.encode_seed(os.urandom(32), _PREFIXES[kind])
        return cls(seed.decode(), nkeys.from_seed(seed).public_key.decode())


def _claims(subject: Key, kind: str, nats: dict[str, Any], std: dict[str, Any]) -> dict[str, Any]:
    return {**std, "sub": subject.public, "nats": {**nats, "type": kind}}


def operator_jwt(operator: Key, *, signer: Key | None = None, **nats: Any) -> str:
    """An operator JWT (self-signed unless `signer`); `nats`: its fields (signing_keys...)."""
    return encode(_claims(operator, "operator", nats, {"name": "OP"}), (signer or operator).seed)


def account_jwt(account: Key, signer: Key, *, std: dict[str, Any] | None = None,
                **nats: Any) -> str:
    """An account JWT signed by `signer` (an operator key); unlimited unless `limits` says;
    `std`: standard claims (exp, nbf, iat, name...)."""
    nats = {**nats, "limits": {**UNLIMITED_ACCOUNT, **nats.get("limits", {})}}
    return encode(_claims(account, "account", nats, {"name": "ACC", **(std or {})}), signer.seed)


def user_jwt(user: Key, signer: Key, *, std: dict[str, Any] | None = None,
             scoped: bool = False, **nats: Any) -> str:
    """A user JWT signed by `signer` (its account, or a signing key: then give
    `issuer_account`); unlimited unless given, with no limits at all when `scoped`."""
    nats = nats if scoped else {**UNLIMITED_USER, **nats}
    return encode(_claims(user, "user", nats, {"name": "U", **(std or {})}), signer.seed)


def write_creds(path: Path, token: str, user: Key) -> Path:
    path.write_text(format_creds(token, user.seed))
    return path


def operator_config(operator_token_path: Path, accounts: dict[str, str], extra: str = "") -> str:
    """A configuration trusting the operator JWT at `operator_token_path`, with `accounts`
    (public key: account JWT) preloaded into the memory resolver."""
    preload = "\n".join(f"  {key}: {token}" for key, token in accounts.items())
    return (f'operator: "{operator_token_path}"\nresolver: MEMORY\n'
            f"resolver_preload: {{\n{preload}\n}}\n{extra}")
