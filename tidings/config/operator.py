"""Operator mode (decentralised JWT authentication) as the configuration gives it: the
trusted operators (`operator`: JWT files or the JWTs inline), the account resolver
(`resolver: MEMORY`, or `resolver { type: full|cache, dir, ... }`), the accounts preloaded
into it (`resolver_preload`), with the reference's keys, error messages and checks
(validateTrustedOperators). The server's side is server/operator.py."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from .jwt import JwtError, OperatorClaims, decode_account, decode_operator, read_creds
from .parser import Section
from .units import file_duration

JWT_PREFIX = "eyJ"
_MEMORY = re.compile(r"(?i)(MEM|MEMORY)\s*")
_URL = re.compile(r'(?i)(?:URL)(?:\(\s*"?([^\s"]*)"?\s*\))?\s*')


@dataclass
class ResolverOptions:
    """`resolver`: MEMORY (the preloaded accounts only), FULL (a directory kept in step with
    `$SYS.REQ.CLAIMS.UPDATE`), CACHE (a bounded directory) or URL (an account server)."""

    kind: str = "MEMORY"
    dir: str = ""
    allow_delete: bool = False
    hard_delete: bool = False
    limit: int = 0
    ttl: float = 0.0
    interval: float = 0.0
    timeout: float = 0.0
    url: str = ""


@dataclass
class OperatorOptions:
    """The trusted operators (their JWTs and claims), the resolver and its preloads."""

    jwts: list[str] = field(default_factory=list)
    claims: list[OperatorClaims] = field(default_factory=list)
    resolver: ResolverOptions | None = None
    preload: dict[str, str] = field(default_factory=dict)
    trusted_keys: list[str] = field(default_factory=list)

    @property
    def keys(self) -> set[str]:
        """Every key an account JWT may be signed with: the operators' and their signing
        keys (and `trusted` keys)."""
        keys = set(self.trusted_keys)
        for claims in self.claims:
            keys.add(claims.subject)
            keys.update(claims.signing_keys)
        return keys


def read_operator_jwt(value: str) -> tuple[str, OperatorClaims]:
    """An operator JWT from a file (a bare JWT or decorated, as `nsc` writes it), or the
    JWT itself inline."""
    try:
        with open(value, encoding="utf-8") as f:
            contents = f.read()
    except OSError as exc:
        if not value.startswith(JWT_PREFIX):
            raise ValueError(f"open {value}: {exc.strerror or exc}") from None
        contents = value
    token = _decorated_jwt(contents)
    try:
        return token, decode_operator(token)
    except JwtError as exc:
        raise ValueError(str(exc)) from None


def _decorated_jwt(contents: str) -> str:
    if "-----BEGIN" in contents:
        try:
            token, _ = read_creds(contents)
            if token:
                return token
        except ValueError:
            pass
    return contents.strip()


def parse_operators(value: Any) -> tuple[list[str], list[OperatorClaims]]:
    """`operator`: one file name or JWT, or a list of them."""
    if isinstance(value, str):
        items = [value]
    elif isinstance(value, list):
        items = value
    else:
        raise ValueError(f"error parsing operators: unsupported type {type(value).__name__}")
    jwts: list[str] = []
    claims: list[OperatorClaims] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError("error parsing operators: unsupported type "
                             f"{type(item).__name__} where string is expected")
        try:
            token, opc = read_operator_jwt(item)
        except ValueError as exc:
            raise ValueError(f"error parsing operator JWT: {exc}") from None
        jwts.append(token)
        claims.append(opc)
    return jwts, claims


def parse_resolver(value: Any) -> ResolverOptions:
    """`resolver`: MEM/MEMORY, URL("..."), or a map with `type` and `dir`."""
    if isinstance(value, str):
        if _MEMORY.match(value):
            return ResolverOptions("MEMORY")
        m = _URL.fullmatch(value.strip())
        if m and m.group(1):
            return ResolverOptions("URL", url=m.group(1))
    elif isinstance(value, dict):
        return _resolver_map(value)
    else:
        raise ValueError(f"error parsing operator resolver, wrong type {type(value).__name__}")
    raise ValueError('error parsing account resolver, should be MEM or  URL("url") or a map '
                     "containing dir and type state=[FULL|CACHE])")


def _resolver_map(block: dict[str, Any]) -> ResolverOptions:
    opts = ResolverOptions("")
    hard_delete_set = False
    for key, value in block.items():
        name = key.lower()
        if name == "dir":
            opts.dir = str(value)
        elif name == "type":
            opts.kind = str(value).upper()
        elif name == "allow_delete":
            opts.allow_delete = bool(value)
        elif name == "hard_delete":
            opts.hard_delete, hard_delete_set = bool(value), True
        elif name == "limit":
            opts.limit = int(value)
        elif name in ("ttl", "interval", "timeout"):
            setattr(opts, name, file_duration(value))
        elif key not in getattr(block, "variables", ()):
            raise ValueError(f'unknown field "{key}"')
    if opts.kind == "MEM":
        opts.kind = "MEMORY"
    if opts.kind in ("CACHE", "FULL"):
        _check_dir(opts.dir)
    if opts.kind == "CACHE":
        if opts.interval:
            raise ValueError("CACHE does not accept sync")
        if opts.allow_delete:
            raise ValueError("CACHE does not accept allow_delete")
        if hard_delete_set:
            raise ValueError("CACHE does not accept hard_delete")
    elif opts.kind == "FULL":
        if opts.ttl:
            raise ValueError("FULL does not accept ttl")
        if hard_delete_set and not opts.allow_delete:
            raise ValueError("hard_delete has no effect without delete")
    elif opts.kind != "MEMORY":
        raise ValueError('error parsing account resolver, should be MEM or  URL("url") or a '
                         "map containing dir and type state=[FULL|CACHE])")
    return opts


def _check_dir(path: str) -> None:
    if not path:
        raise ValueError("dir has no value and needs to point to a directory")
    if os.path.exists(path) and not (os.path.isdir(path) and os.access(path, os.W_OK)):
        raise ValueError("dir needs to point to an accessible directory")


def parse_preload(value: Any) -> dict[str, str]:
    """`resolver_preload`: account public key -> account JWT (each must decode)."""
    if not isinstance(value, dict):
        raise ValueError("preload should be a map of account_public_key:account_jwt")
    preload: dict[str, str] = {}
    for key, token in value.items():
        if not isinstance(token, str):
            raise _at(value, key, "preload map value should be a string JWT")
        try:
            decode_account(token, now=0)
        except JwtError:
            raise _at(value, key, "invalid account JWT") from None
        preload[key] = token
    return preload


def _at(block: Any, key: str, message: str) -> ValueError:
    if isinstance(block, Section):
        from .parser import ConfigError

        return ConfigError(f"{block.where(key)}: {message}")
    return ValueError(message)


def parse_trusted(value: Any) -> list[str]:
    """`trusted`: operator public keys trusted without their JWTs."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ValueError(f"error parsing trusted: unsupported type {type(value).__name__}")


def check_operator_mode(operator: OperatorOptions, system_account: str, has_accounts: bool,
                        has_users: bool) -> str:
    """The reference's checks of operator mode (ValueError with its words); the system
    account to use (the configuration's, else the first operator's)."""
    if not operator.claims:
        return system_account
    if operator.resolver is None:
        raise ValueError("operators require an account resolver to be configured")
    if operator.resolver.kind == "URL":
        raise ValueError('resolver URL("..."): an account server is not supported by '
                         "tidings yet (use MEMORY with resolver_preload, or a full resolver)")
    if has_accounts:
        raise ValueError("operators do not allow Accounts to be configured directly")
    if has_users:
        raise ValueError("operators do not allow users to be configured directly")
    if operator.trusted_keys:
        raise ValueError("conflicting options for 'TrustedKeys' and 'TrustedOperators'")
    if system_account:
        named = [c.system_account for c in operator.claims if c.system_account]
        if named and system_account not in named:
            raise ValueError("system_account in config and operator JWT must be identical")
        return system_account
    first = operator.claims[0].system_account
    if not first and operator.resolver.kind in ("FULL", "CACHE"):
        raise ValueError("using nats based account resolver - the system account needs to be "
                         "specified in configuration or the operator jwt")
    return first
