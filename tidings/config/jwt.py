"""NATS JWTs, as operator mode (decentralised auth) reads them: decode and verify a JWT,
its claims typed, and the checks the reference server makes with them.

A NATS JWT is `header.payload.signature`, each base64url without padding; the header is
`{"typ":"JWT","alg":"ed25519-nkey"}` (v2; `ed25519` is accepted too, as the reference's
jwt library does); the signature is ed25519 by the public NKey named in `iss`, over
`header.payload` for v2 claims and over `payload` alone for v1 claims (a top-level
`type`), which are read into the v2 shapes as the library migrates them.

- `decode(token, now)` returns OperatorClaims, AccountClaims, UserClaims or
  ActivationClaims, or raises `JwtError` (a ValueError) saying what is wrong: the format,
  the signature, the kind of key that signed, the claim type, the times (`exp`, `nbf`), or
  a field the reference's validation refuses (`problems`: a CIDR, a time range, a zone, a
  permission subject, a key, an import/export type or count, an operator URL, a
  mapping's subjects and weights...; not checked: the activation tokens inside imports,
  export response types and latency, external authorization keys).
- `is_revoked`, `user_allowed_now` (`times`, `times_location`), `connect_window`,
  `source_allowed` (`src`): the server's checks at CONNECT; `AccountClaims.signer_scope`:
  whether a key may sign the account's users, and the scope (template) it imposes.
- `read_creds` / `format_creds`: the clients' `.creds` files; `encode`: mints JWTs (for tests
  and tools) as the reference's library writes them.

Field values are kept as the JWT says them (-1: unlimited; an absent limit is 0, as the
reference reads it); durations (`ttl`, `response_threshold`) are converted from the JWT's
nanoseconds to seconds. Parts this module does not type (JetStream limits, external
authorization, trace) are kept as the JWT's dicts. Pure code: no I/O, no asyncio.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import json
import re
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

ALGORITHM = "ed25519-nkey"  # v2
ALGORITHM_V1 = "ed25519"
LIB_VERSION = 2
MAX_TOKEN_SIZE = 1024 * 1024  # as the reference's jwt library
NO_LIMIT = -1
ALL = "*"  # a revocation of every user key (and the "any account" of allowed_accounts)

OPERATOR, ACCOUNT, USER, ACTIVATION = "operator", "account", "user", "activation"
CONNECTION_TYPES = ("STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS",
                    "IN_PROCESS")

# NKey prefix bytes (the first base32 character of a public key).
PREFIX_OPERATOR, PREFIX_ACCOUNT, PREFIX_USER = 14 << 3, 0, 20 << 3
PREFIX_SERVER, PREFIX_CLUSTER, PREFIX_CURVE = 13 << 3, 2 << 3, 23 << 3
_PUBLIC_PREFIXES = (PREFIX_OPERATOR, PREFIX_ACCOUNT, PREFIX_USER, PREFIX_SERVER, PREFIX_CLUSTER)
_KEY_NAMES = {PREFIX_OPERATOR: "an operator", PREFIX_ACCOUNT: "an account", PREFIX_USER: "a user"}
# Which keys may sign each claim type (the library's ExpectedPrefixes).
_SIGNERS = {OPERATOR: (PREFIX_OPERATOR,), ACCOUNT: (PREFIX_ACCOUNT, PREFIX_OPERATOR),
            USER: (PREFIX_ACCOUNT,), ACTIVATION: (PREFIX_ACCOUNT, PREFIX_OPERATOR)}


class JwtError(ValueError):
    """A JWT that cannot be used: the message says why."""


# -- the claims --------------------------------------------------------------------------


@dataclass(frozen=True)
class Permission:
    """Allow and deny subject lists of one direction (a sub entry may be "subject queue")."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResponsePermission:
    """`resp` (allow_responses): `max_msgs` replies within `expires` seconds; the server
    takes 0 as its defaults (1 message, 2 minutes)."""

    max_msgs: int = 0
    expires: float = 0.0


@dataclass(frozen=True)
class Permissions:
    pub: Permission = field(default_factory=Permission)
    sub: Permission = field(default_factory=Permission)
    resp: ResponsePermission | None = None


@dataclass(frozen=True)
class TimeRange:
    """A daily window "HH:MM:SS" to "HH:MM:SS" (crossing midnight when start > end)."""

    start: str = ""
    end: str = ""


@dataclass(frozen=True)
class UserPermissionLimits:
    """What a user JWT (or a scoped signing key's template) grants: permissions, the
    connection's limits and restrictions."""

    pub: Permission = field(default_factory=Permission)
    sub: Permission = field(default_factory=Permission)
    resp: ResponsePermission | None = None
    src: tuple[str, ...] = ()  # CIDRs the client may connect from (empty: any)
    times: tuple[TimeRange, ...] = ()  # when it may connect (empty: always)
    locale: str = ""  # times_location, an IANA zone (empty: the server's local time)
    subs: int = 0
    data: int = 0
    payload: int = 0
    bearer_token: bool = False  # no nonce signature needed
    proxy_required: bool = False
    allowed_connection_types: tuple[str, ...] = ()  # empty: all

    @property
    def permissions(self) -> Permissions:
        return Permissions(self.pub, self.sub, self.resp)


@dataclass(frozen=True)
class Claims:
    """What every NATS JWT holds; `raw` is the whole decoded payload."""

    subject: str
    issuer: str
    issued_at: int = 0
    expires: int = 0
    not_before: int = 0
    name: str = ""
    id: str = ""
    audience: str = ""
    kind: str = ""
    version: int = LIB_VERSION
    tags: tuple[str, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class OperatorClaims(Claims):
    signing_keys: tuple[str, ...] = ()
    account_server_url: str = ""
    operator_service_urls: tuple[str, ...] = ()
    system_account: str = ""
    assert_server_version: str = ""
    strict_signing_key_usage: bool = False

    def did_sign(self, claims: Claims) -> bool:
        """Whether this operator signed `claims` (its identity key, not for other subjects
        under strict signing key usage, or one of its signing keys)."""
        if claims.issuer == self.subject:
            return not self.strict_signing_key_usage or claims.subject == self.subject
        return claims.issuer in self.signing_keys


@dataclass(frozen=True)
class ServiceLatency:
    sampling: int = 0  # percent; 0: "headers" (the requester's headers decide)
    results: str = ""


@dataclass(frozen=True)
class Export:
    subject: str = ""
    type: str = ""  # "stream" | "service"
    name: str = ""
    token_req: bool = False
    revocations: dict[str, int] = field(default_factory=dict)
    response_type: str = ""  # service: "Singleton" (also ""), "Stream", "Chunked"
    response_threshold: float = 0.0  # seconds
    latency: ServiceLatency | None = None
    account_token_position: int = 0
    advertise: bool = False
    allow_trace: bool = False
    description: str = ""
    info_url: str = ""


@dataclass(frozen=True)
class Import:
    subject: str = ""
    account: str = ""
    type: str = ""  # "stream" | "service"
    name: str = ""
    token: str = ""  # an activation JWT, for exports that require one
    to: str = ""  # deprecated by local_subject
    local_subject: str = ""
    share: bool = False
    allow_trace: bool = False


@dataclass(frozen=True)
class WeightedMapping:
    """One destination of an account's subject mapping (`mappings: {from: [...]}`)."""

    subject: str = ""
    weight: int = 0  # percent; 0: 100 (the library's GetWeight), unless cluster-scoped
    cluster: str = ""

    def get_weight(self) -> int:
        return self.weight or 100


@dataclass(frozen=True)
class AccountLimits:
    """The operator's limits on an account (-1: unlimited)."""

    subs: int = 0
    data: int = 0
    payload: int = 0
    imports: int = 0
    exports: int = 0
    wildcards: bool = False  # wildcard exports allowed
    disallow_bearer: bool = False
    conn: int = 0
    leaf: int = 0
    jetstream: dict[str, Any] = field(default_factory=dict)  # mem_storage..., tiered_limits


@dataclass(frozen=True)
class UserScope:
    """A scoped signing key: users it signs get `template` instead of their own
    permissions and limits (which must be empty)."""

    key: str
    role: str = ""
    template: UserPermissionLimits = field(default_factory=UserPermissionLimits)
    description: str = ""


@dataclass(frozen=True)
class AccountClaims(Claims):
    imports: tuple[Import, ...] = ()
    exports: tuple[Export, ...] = ()
    limits: AccountLimits = field(default_factory=AccountLimits)
    signing_keys: dict[str, UserScope | None] = field(default_factory=dict)
    revocations: dict[str, int] = field(default_factory=dict)
    default_permissions: Permissions = field(default_factory=Permissions)
    mappings: dict[str, tuple[WeightedMapping, ...]] = field(default_factory=dict)
    authorization: dict[str, Any] = field(default_factory=dict)
    trace: dict[str, Any] | None = None
    cluster_traffic: str = ""
    description: str = ""
    info_url: str = ""

    def signer_scope(self, issuer: str, strict: bool = False) -> tuple[bool, UserScope | None]:
        """Whether `issuer` may sign this account's users (one of its signing keys, or the
        account's own key unless the operator has `strict_signing_key_usage`), and the
        scope that key imposes (None: an unscoped key)."""
        if issuer in self.signing_keys:
            return True, self.signing_keys[issuer]
        return (not strict and issuer == self.subject), None


@dataclass(frozen=True)
class UserClaims(Claims):
    user: UserPermissionLimits = field(default_factory=UserPermissionLimits)
    issuer_account: str = ""  # set when a signing key of that account signed

    @property
    def account(self) -> str:
        """The account the user belongs to."""
        return self.issuer_account or self.issuer

    def has_empty_permissions(self) -> bool:
        """No permissions nor limits of its own (as a scoped signing key requires)."""
        return self.user == UserPermissionLimits()


@dataclass(frozen=True)
class ActivationClaims(Claims):
    import_subject: str = ""
    import_type: str = ""
    issuer_account: str = ""


# -- decoding ----------------------------------------------------------------------------

_C = TypeVar("_C", bound=Claims)
_B64URL = re.compile(r"[A-Za-z0-9_-]*")


def decode(token: str, now: float | None = None, *, expect: str | None = None) -> Claims:
    """The verified claims of `token`, valid at `now` (Unix seconds; default: the clock).
    `expect`: the claim type required ("operator", "account", "user", "activation")."""
    if not isinstance(token, str):
        raise JwtError("a JWT is a string")
    if len(token) > MAX_TOKEN_SIZE:
        raise JwtError(f"token size {len(token)} exceeds the maximum of {MAX_TOKEN_SIZE} bytes")
    chunks = token.split(".")
    if len(chunks) != 3:
        raise JwtError(f"expected 3 chunks separated by '.', got {len(chunks)}")
    _check_header(_json_object(chunks[0], "header"))
    payload = _json_object(chunks[1], "payload")
    kind, version = _identify(payload)
    claims = _load(kind, version, payload)
    signed = chunks[1] if version <= 1 else f"{chunks[0]}.{chunks[1]}"
    _verify(claims.issuer, signed.encode(), _b64decode(chunks[2], "signature"), version)
    _check_signer(claims)
    if expect is not None and kind != expect:
        raise JwtError(f"not {expect} claims: the JWT holds {kind} claims")
    _check_times(claims, time.time() if now is None else now)
    issues = problems(claims)
    if issues:
        raise JwtError(f"invalid {kind} claims: " + "; ".join(issues))
    return claims


def _decode_as(token: str, now: float | None, kind: str, cls: type[_C]) -> _C:
    claims = decode(token, now, expect=kind)
    assert isinstance(claims, cls)
    return claims


def decode_operator(token: str, now: float | None = None) -> OperatorClaims:
    return _decode_as(token, now, OPERATOR, OperatorClaims)


def decode_account(token: str, now: float | None = None) -> AccountClaims:
    return _decode_as(token, now, ACCOUNT, AccountClaims)


def decode_user(token: str, now: float | None = None) -> UserClaims:
    return _decode_as(token, now, USER, UserClaims)


def decode_activation(token: str, now: float | None = None) -> ActivationClaims:
    return _decode_as(token, now, ACTIVATION, ActivationClaims)


def _b64decode(chunk: str, what: str) -> bytes:
    if not _B64URL.fullmatch(chunk):
        raise JwtError(f"the {what} is not base64url without padding")
    try:
        return base64.urlsafe_b64decode(chunk + "=" * (-len(chunk) % 4))
    except (binascii.Error, ValueError) as e:
        raise JwtError(f"the {what} is not base64url without padding ({e})") from None


def _json_object(chunk: str, what: str) -> dict[str, Any]:
    data = _b64decode(chunk, what)
    try:
        value = json.loads(data)
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError among them
        raise JwtError(f"the {what} is not JSON ({e})") from None
    except RecursionError:
        raise JwtError(f"the {what} is nested too deeply") from None
    if not isinstance(value, dict):
        raise JwtError(f"the {what} is not a JSON object")
    return value


def _check_header(header: dict[str, Any]) -> None:
    typ, alg = header.get("typ"), header.get("alg")
    if not isinstance(typ, str) or typ.upper() != "JWT":
        raise JwtError(f"not a NATS JWT: unsupported type {typ!r}")
    if not isinstance(alg, str) or alg.lower() not in (ALGORITHM, ALGORITHM_V1):
        raise JwtError(f"not a NATS JWT: unexpected algorithm {alg!r}")


def _identify(payload: dict[str, Any]) -> tuple[str, int]:
    """The claim type and version: v1 has `type` at the top, v2 in `nats`."""
    nats = _obj(payload, "nats")
    top = _str(payload, "type")
    kind = top or _str(nats, "type", "nats.")
    version = 1 if top else _int(nats, "version", "nats.")
    if version > LIB_VERSION:
        raise JwtError(f"JWT was generated by a newer version ({version})")
    if kind not in _SIGNERS:
        raise JwtError(f"unsupported claim type {kind!r}" if kind else "the JWT has no claim type")
    if version < 1:
        raise JwtError(f"claims version {version} is not supported (1 or 2)")
    return kind, version


def _verify(issuer: str, signed: bytes, signature: bytes, version: int) -> None:
    from nacl.exceptions import BadSignatureError
    from nacl.signing import VerifyKey

    key = public_key_bytes(issuer)
    if key is None:
        raise JwtError(f"the issuer {issuer!r} is not a public NKey")
    try:
        VerifyKey(key).verify(signed, signature)
    except (BadSignatureError, ValueError, TypeError):
        raise JwtError(f"claim failed V{max(version, 1)} signature verification") from None


def _check_signer(claims: Claims) -> None:
    allowed = _SIGNERS[claims.kind]
    if public_key_bytes(claims.issuer, *allowed) is None:
        names = " or ".join(_KEY_NAMES[p] for p in allowed)
        raise JwtError(f"{claims.kind} JWT issuer {claims.issuer} is not {names} key")


def _check_times(claims: Claims, now: float) -> None:
    second = int(now)
    if claims.expires > 0 and second > claims.expires:
        raise JwtError(f"claim is expired (exp {claims.expires}, now {second})")
    if claims.not_before > 0 and claims.not_before > second:
        raise JwtError(f"claim is not yet valid (nbf {claims.not_before}, now {second})")


# -- typed reading of the JSON (a wrong JSON type fails as the reference's decoding does) --


def _bad(path: str, key: str, expected: str) -> JwtError:
    return JwtError(f"claim field {path}{key} is not {expected}")


def _str(d: dict[str, Any], key: str, path: str = "") -> str:
    value = d.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _bad(path, key, "a string")
    return value


def _int(d: dict[str, Any], key: str, path: str = "", default: int = 0) -> int:
    value = d.get(key)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise _bad(path, key, "an integer")
    return value


def _bool(d: dict[str, Any], key: str, path: str = "") -> bool:
    value = d.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _bad(path, key, "a boolean")
    return value


def _obj(d: dict[str, Any], key: str, path: str = "") -> dict[str, Any]:
    value = d.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(path, key, "an object")
    return value


def _list(d: dict[str, Any], key: str, path: str = "") -> list[Any]:
    value = d.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad(path, key, "a list")
    return value


def _strs(d: dict[str, Any], key: str, path: str = "") -> tuple[str, ...]:
    items = _list(d, key, path)
    if not all(isinstance(s, str) for s in items):
        raise _bad(path, key, "a list of strings")
    return tuple(items)


def _objs(d: dict[str, Any], key: str, path: str = "") -> list[dict[str, Any]]:
    items = _list(d, key, path)
    if not all(isinstance(o, dict) for o in items):
        raise _bad(path, key, "a list of objects")
    return items


def _timestamps(d: dict[str, Any], key: str, path: str) -> dict[str, int]:
    revocations = _obj(d, key, path)
    return {k: _int(revocations, k, f"{path}{key}.") for k in revocations}


def _seconds(d: dict[str, Any], key: str, path: str) -> float:
    return _int(d, key, path) / 1e9  # a Go time.Duration: nanoseconds


def _export_type(d: dict[str, Any], key: str, path: str) -> str:
    kind = _str(d, key, path)
    if kind not in ("", "stream", "service"):
        raise JwtError(f"unknown export type {kind!r} in {path}{key}")
    return kind


# -- building the typed claims -----------------------------------------------------------


def _load(kind: str, version: int, payload: dict[str, Any]) -> Claims:
    nats = _obj(payload, "nats")
    tags = _strs(payload, "tags") if version == 1 else _strs(nats, "tags", "nats.")
    base: dict[str, Any] = dict(
        subject=_str(payload, "sub"), issuer=_str(payload, "iss"),
        issued_at=_int(payload, "iat"), expires=_int(payload, "exp"),
        not_before=_int(payload, "nbf"), name=_str(payload, "name"), id=_str(payload, "jti"),
        audience=_str(payload, "aud"), kind=kind, version=version, tags=tags, raw=payload)
    if kind == OPERATOR:
        return _operator(base, nats)
    if kind == ACCOUNT:
        return _account(base, nats, version)
    if kind == USER:
        issuer_account = _str(payload if version == 1 else nats, "issuer_account")
        return UserClaims(**base, user=_user_limits(nats, "nats.", -1 if version == 1 else 0),
                          issuer_account=issuer_account)
    return _activation(base, nats, payload, version)


def _operator(base: dict[str, Any], nats: dict[str, Any]) -> OperatorClaims:
    p = "nats."
    return OperatorClaims(
        **base, signing_keys=_strs(nats, "signing_keys", p),
        account_server_url=_str(nats, "account_server_url", p),
        operator_service_urls=_strs(nats, "operator_service_urls", p),
        system_account=_str(nats, "system_account", p),
        assert_server_version=_str(nats, "assert_server_version", p),
        strict_signing_key_usage=_bool(nats, "strict_signing_key_usage", p))


def _activation(base: dict[str, Any], nats: dict[str, Any], payload: dict[str, Any],
                version: int) -> ActivationClaims:
    p = "nats."
    return ActivationClaims(
        **base, import_subject=_str(nats, "subject", p),
        import_type=_export_type(nats, "type" if version == 1 else "kind", p),
        issuer_account=_str(payload if version == 1 else nats, "issuer_account"))


def _permission(d: dict[str, Any], key: str, path: str) -> Permission:
    p = _obj(d, key, path)
    where = f"{path}{key}."
    return Permission(_strs(p, "allow", where), _strs(p, "deny", where))


def _permissions(d: dict[str, Any], path: str) -> Permissions:
    resp = None
    if d.get("resp") is not None:
        r = _obj(d, "resp", path)
        resp = ResponsePermission(_int(r, "max", f"{path}resp."), _seconds(r, "ttl", f"{path}resp."))
    return Permissions(_permission(d, "pub", path), _permission(d, "sub", path), resp)


def _cidrs(d: dict[str, Any], path: str) -> tuple[str, ...]:
    """`src`: a list, or (as the library also reads it) one comma-separated string."""
    value = d.get("src")
    if isinstance(value, str):
        return tuple(dict.fromkeys(s.strip().lower() for s in value.split(",") if s.strip()))
    return _strs(d, "src", path)


def _user_limits(d: dict[str, Any], path: str, unset: int) -> UserPermissionLimits:
    """The fields of a user JWT (or scope template); `unset`: an absent subs/data/payload
    (-1 for templates and v1 users, 0 for v2 users)."""
    perms = _permissions(d, path)
    times = tuple(TimeRange(_str(t, "start", f"{path}times."), _str(t, "end", f"{path}times."))
                  for t in _objs(d, "times", path))
    return UserPermissionLimits(
        pub=perms.pub, sub=perms.sub, resp=perms.resp, src=_cidrs(d, path), times=times,
        locale=_str(d, "times_location", path), subs=_int(d, "subs", path, unset),
        data=_int(d, "data", path, unset), payload=_int(d, "payload", path, unset),
        bearer_token=_bool(d, "bearer_token", path),
        proxy_required=_bool(d, "proxy_required", path),
        allowed_connection_types=_strs(d, "allowed_connection_types", path))


def _export(d: dict[str, Any], path: str) -> Export:
    latency = None
    if d.get("service_latency") is not None:
        lat = _obj(d, "service_latency", path)
        latency = ServiceLatency(_sampling(lat.get("sampling"), path),
                                 _str(lat, "results", f"{path}service_latency."))
    return Export(
        subject=_str(d, "subject", path), type=_export_type(d, "type", path),
        name=_str(d, "name", path), token_req=_bool(d, "token_req", path),
        revocations=_timestamps(d, "revocations", path),
        response_type=_str(d, "response_type", path),
        response_threshold=_seconds(d, "response_threshold", path), latency=latency,
        account_token_position=_int(d, "account_token_position", path),
        advertise=_bool(d, "advertise", path), allow_trace=_bool(d, "allow_trace", path),
        description=_str(d, "description", path), info_url=_str(d, "info_url", path))


def _sampling(value: Any, path: str) -> int:
    if value is None or (isinstance(value, str) and value.lower() == "headers"):
        return 0
    if not isinstance(value, int) or isinstance(value, bool):
        raise _bad(path, "service_latency.sampling", 'an integer or "headers"')
    return value


def _import(d: dict[str, Any], path: str) -> Import:
    return Import(
        subject=_str(d, "subject", path), account=_str(d, "account", path),
        type=_export_type(d, "type", path), name=_str(d, "name", path),
        token=_str(d, "token", path), to=_str(d, "to", path),
        local_subject=_str(d, "local_subject", path), share=_bool(d, "share", path),
        allow_trace=_bool(d, "allow_trace", path))


_JS_LIMITS = ("mem_storage", "disk_storage", "streams", "consumer", "max_ack_pending",
              "mem_max_stream_bytes", "disk_max_stream_bytes", "max_bytes_required")


def _account_limits(d: dict[str, Any], version: int) -> AccountLimits:
    p = "nats.limits."
    js = {} if version == 1 else {k: d[k] for k in _JS_LIMITS if d.get(k) is not None}
    tiered = _obj(d, "tiered_limits", p) if version > 1 else {}
    if tiered:  # the library drops the untiered JetStream limits then
        js = {"tiered_limits": tiered}
    return AccountLimits(
        subs=_int(d, "subs", p), data=_int(d, "data", p), payload=_int(d, "payload", p),
        imports=_int(d, "imports", p), exports=_int(d, "exports", p),
        wildcards=_bool(d, "wildcards", p), disallow_bearer=_bool(d, "disallow_bearer", p),
        conn=_int(d, "conn", p), leaf=_int(d, "leaf", p), jetstream=js)


def _signing_keys(nats: dict[str, Any]) -> dict[str, UserScope | None]:
    keys: dict[str, UserScope | None] = {}
    for entry in _list(nats, "signing_keys", "nats."):
        if isinstance(entry, str):
            keys[entry] = None
        elif isinstance(entry, dict):
            scope = _scope(entry)
            keys[scope.key] = scope
        else:
            raise _bad("nats.", "signing_keys", "a list of keys and scopes")
    return keys


def _mappings(nats: dict[str, Any], p: str) -> dict[str, tuple[WeightedMapping, ...]]:
    """`mappings`: each subject's weighted destinations (a weight is Go's uint8)."""
    out: dict[str, tuple[WeightedMapping, ...]] = {}
    path = f"{p}mappings."
    for source in (mappings := _obj(nats, "mappings", p)):
        entries = []
        for entry in _objs(mappings, source, path):
            weight = _int(entry, "weight", f"{path}{source}.")
            if not 0 <= weight <= 255:
                raise _bad(f"{path}{source}.", "weight", "an integer from 0 to 255")
            entries.append(WeightedMapping(_str(entry, "subject", f"{path}{source}."), weight,
                                           _str(entry, "cluster", f"{path}{source}.")))
        out[source] = tuple(entries)
    return out


def _scope(entry: dict[str, Any]) -> UserScope:
    p = "nats.signing_keys."
    kind = entry.get("kind")
    if kind != "user_scope":
        raise JwtError(f"unknown signing key scope {kind!r}")
    return UserScope(key=_str(entry, "key", p), role=_str(entry, "role", p),
                     template=_user_limits(_obj(entry, "template", p), f"{p}template.", -1),
                     description=_str(entry, "description", p))


def _account(base: dict[str, Any], nats: dict[str, Any], version: int) -> AccountClaims:
    p = "nats."
    trace = _obj(nats, "trace", p) if nats.get("trace") is not None else None
    return AccountClaims(
        **base, imports=tuple(_import(i, f"{p}imports.") for i in _objs(nats, "imports", p)),
        exports=tuple(_export(e, f"{p}exports.") for e in _objs(nats, "exports", p)),
        limits=_account_limits(_obj(nats, "limits", p), version),
        signing_keys=_signing_keys(nats), revocations=_timestamps(nats, "revocations", p),
        default_permissions=_permissions(_obj(nats, "default_permissions", p),
                                         f"{p}default_permissions."),
        mappings=_mappings(nats, p), authorization=_obj(nats, "authorization", p),
        trace=trace, cluster_traffic=_str(nats, "cluster_traffic", p),
        description=_str(nats, "description", p), info_url=_str(nats, "info_url", p))


# -- validation: the blocking errors of the reference's Validate ---------------------------


def problems(claims: Claims) -> list[str]:
    """What the reference's validation refuses in `claims` (besides the times)."""
    if isinstance(claims, UserClaims):
        return _user_problems(claims)
    if isinstance(claims, AccountClaims):
        return _account_problems(claims)
    if isinstance(claims, OperatorClaims):
        return _operator_problems(claims)
    if isinstance(claims, ActivationClaims):
        out = [] if claims.import_type else ["invalid import type: ''"]
        out += _subject_problems(claims.import_subject)
        return out + _key_problems([claims.issuer_account], PREFIX_ACCOUNT, "issuer_account")
    return []


def _subject_problems(subject: str) -> list[str]:
    if not subject:
        return ["subject cannot be empty"]
    out = []
    if " " in subject:
        out.append(f"subject {subject!r} cannot have spaces")
    if subject[0] == "." or subject[-1] == ".":
        out.append(f"subject {subject!r} cannot start or end with a '.'")
    if ".." in subject:
        out.append(f"subject {subject!r} cannot contain consecutive '.'")
    return out


def _permission_problems(perm: Permission, queues: bool) -> list[str]:
    out: list[str] = []
    for entry in perm.allow + perm.deny:
        tokens = entry.split(" ")
        if len(tokens) > 2:
            out.append(f"permission subject {entry!r} contains too many spaces")
            continue
        for token in tokens:
            out += _subject_problems(token)
        if len(tokens) == 2 and not queues:
            out.append(f"permission subject {entry!r} is not allowed to contain a queue")
    return out


def _limits_problems(u: UserPermissionLimits) -> list[str]:
    out = _permission_problems(u.sub, True) + _permission_problems(u.pub, False)
    out += [f"invalid cidr {c!r} in user src limits" for c in u.src if _network(c) is None]
    for t in u.times:
        out += [f"{what} in time range is invalid {value!r}"
                for what, value in (("start", t.start), ("end", t.end))
                if _clock(value) is None]
    if u.locale not in ("", "Local") and _zone(u.locale) is None:
        out.append(f"could not parse iana time zone by name: {u.locale!r}")
    return out


def _key_problems(keys: list[str] | tuple[str, ...], prefix: int, what: str) -> list[str]:
    return [f"{what} {k} is not {_KEY_NAMES[prefix]} public key" for k in keys
            if k and public_key_bytes(k, prefix) is None]


def _user_problems(claims: UserClaims) -> list[str]:
    return (_limits_problems(claims.user)
            + _key_problems([claims.issuer_account], PREFIX_ACCOUNT, "issuer_account"))


def _account_problems(claims: AccountClaims) -> list[str]:
    out: list[str] = []
    for imp in claims.imports:
        if not imp.type:
            out.append(f"invalid import type for {imp.subject!r}")
        if not imp.account:
            out.append(f"account to import {imp.subject!r} from is not specified")
        out += _subject_problems(imp.subject)
    for exp in claims.exports:
        if not exp.type:
            out.append(f"invalid export type for {exp.subject!r}")
        out += _subject_problems(exp.subject)
    out += _counted_problems(claims)
    perms = claims.default_permissions
    out += _permission_problems(perms.sub, True) + _permission_problems(perms.pub, False)
    for key, scope in claims.signing_keys.items():
        out += _key_problems([key], PREFIX_ACCOUNT, "signing key")
        if scope is not None:
            out += _limits_problems(scope.template)
    if claims.cluster_traffic not in ("", "system", "owner"):
        out.append(f"unknown cluster traffic option: {claims.cluster_traffic!r}")
    return out + _mapping_problems(claims.mappings)


def _mapping_problems(mappings: dict[str, tuple[WeightedMapping, ...]]) -> list[str]:
    """As the library's Mapping.Validate: valid subjects, and weights that total at most
    100 (those of a cluster among themselves; the sums kept in a uint8, as it keeps them)."""
    out: list[str] = []
    for source, entries in mappings.items():
        out += _subject_problems(source)
        total, clusters = 0, {}
        for entry in entries:
            out += _subject_problems(entry.subject)
            if entry.cluster:
                clusters[entry.cluster] = (clusters.get(entry.cluster, 0) + entry.weight) % 256
                if clusters[entry.cluster] > 100:
                    out.append(f"Mapping {source!r} in cluster {entry.cluster!r} exceeds 100% "
                               "among all of it's weighted to mappings")
            else:
                total = (total + entry.get_weight()) % 256
        if total > 100:
            out.append(f"Mapping {source!r} exceeds 100% among all of it's weighted to mappings")
    return out


def _counted_problems(claims: AccountClaims) -> list[str]:
    """The operator's import/export limits (checked even when the JWT sets no limits)."""
    lim, out = claims.limits, []
    if lim.imports != NO_LIMIT and len(claims.imports) > lim.imports:
        out.append("the account contains more imports than allowed by the operator")
    if lim.exports != NO_LIMIT:
        if len(claims.exports) > lim.exports:
            out.append("the account contains more exports than allowed by the operator")
        if not lim.wildcards and any(_has_wildcards(e.subject) for e in claims.exports):
            out.append("the account contains wildcard exports that are not allowed by the operator")
    return out


def _has_wildcards(subject: str) -> bool:
    """As the library's Subject.HasWildCards."""
    return (subject in ("*", ">") or subject.endswith((".>", ".*")) or ".*." in subject
            or subject.startswith("*."))


def _operator_problems(claims: OperatorClaims) -> list[str]:
    out = _key_problems(claims.signing_keys, PREFIX_OPERATOR, "signing key")
    out += _key_problems([claims.system_account], PREFIX_ACCOUNT, "system_account")
    version = claims.assert_server_version
    if version and not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", version):
        out.append(f"assert server version error: {version!r} is not <major>.<minor>.<update>")
    url = claims.account_server_url
    if url and not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", url):
        out.append(f"account server url {url!r} requires a protocol")
    for url in claims.operator_service_urls:
        if url and url.split("://")[0].lower() not in ("nats", "tls", "ws", "wss"):
            out.append(f"operator service url {url!r} - protocol not supported")
    return out


# -- the server's checks at CONNECT ----------------------------------------------------------


def is_revoked(account: AccountClaims, user_pubkey: str, issued_at: int) -> bool:
    """Whether the account revoked the user JWT of `user_pubkey` issued at `issued_at`: a
    revocation of that key, or of every key ("*"), at or after that time."""
    for key in (user_pubkey, ALL):
        at = account.revocations.get(key)
        if at is not None and at >= issued_at:
            return True
    return False


def source_allowed(user: UserClaims, ip: str) -> bool:
    """Whether a client at `ip` may connect with this user JWT (`src`: empty allows any
    address; an invalid entry reached before a match refuses, as the reference does)."""
    if not user.user.src:
        return True
    if "%" in ip:
        return False  # Go's ParseIP takes no zone
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    for cidr in user.user.src:
        network = _network(cidr)
        if network is None:
            return False
        if address.version == network.version and address in network:
            return True
    return False


def user_allowed_now(user: UserClaims, now: float | None = None) -> bool:
    """Whether the user's `times` (in its `times_location`, else the local zone) allow a
    connection at `now` (Unix seconds)."""
    return connect_window(user, now) is not None


def connect_window(user: UserClaims, now: float | None = None) -> float | None:
    """Seconds the user may stay connected from `now` under its `times` (inf: no times),
    or None when no window is open (the reference's validateTimes: the longest of the
    windows open now; a window is open strictly after its start and before its end)."""
    u = user.user
    if not u.times:
        return float("inf")
    now = time.time() if now is None else now
    zone = None if u.locale in ("", "Local") else _zone(u.locale)
    if zone is None and u.locale not in ("", "Local"):
        return None
    today = datetime.fromtimestamp(now, zone).date()
    best: float | None = None
    for window in u.times:
        left = _left_in(window, today, zone, now)
        if left is not None and (best is None or left > best):
            best = left
    return best


def _left_in(window: TimeRange, today: date, zone: ZoneInfo | None, now: float) -> float | None:
    start_clock, end_clock = _clock(window.start), _clock(window.end)
    if start_clock is None or end_clock is None:
        return None
    start, end = _at(today, start_clock, zone), _at(today, end_clock, zone)
    if start < now < end:
        return end - now
    if start > end:  # crosses midnight
        if end > now:
            return end - now
        end = _at(today + timedelta(days=1), end_clock, zone)
        if start < now < end:
            return end - now
    return None


def _at(day: date, clock: tuple[int, int, int], zone: ZoneInfo | None) -> float:
    return datetime(day.year, day.month, day.day, *clock, tzinfo=zone).timestamp()


def _clock(value: str) -> tuple[int, int, int] | None:
    """ "15:04:05" as Go parses it: hour of one or two digits, minutes and seconds two."""
    m = re.fullmatch(r"([0-9]{1,2}):([0-9]{2}):([0-9]{2})", value)
    if m is None:
        return None
    h, mi, s = (int(g) for g in m.groups())
    return (h, mi, s) if h < 24 and mi < 60 and s < 60 else None


def _zone(name: str) -> ZoneInfo | None:
    """The IANA zone `name` (None: unknown; "" and "Local" are the local zone, no ZoneInfo)."""
    try:
        return ZoneInfo(name)
    except (ValueError, OSError, KeyError):  # ZoneInfoNotFoundError is a KeyError
        return None


def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    if not re.fullmatch(r"[0-9A-Fa-f.:]+/[0-9]+", cidr):
        return None  # as Go's ParseCIDR: an address and a prefix length, no zone
    try:
        return ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return None


# -- keys --------------------------------------------------------------------------------


def public_key_bytes(key: str, *prefixes: int) -> bytes | None:
    """The ed25519 key of a public NKey (of one of `prefixes`; default: any public kind),
    or None when `key` is not one (length, base32, prefix or checksum)."""
    import nkeys

    if not isinstance(key, str) or len(key) != 56:
        return None
    try:
        raw = base64.b32decode(key)
    except (binascii.Error, ValueError):
        return None
    body, crc = raw[:-2], int.from_bytes(raw[-2:], "little")
    if raw[0] not in (prefixes or _PUBLIC_PREFIXES) or nkeys.crc16(bytearray(body)) != crc:
        return None
    return bytes(body[1:])


def is_public_key(key: str, kind: str) -> bool:
    """Whether `key` is a public NKey of `kind` ("operator", "account", "user")."""
    prefix = {OPERATOR: PREFIX_OPERATOR, ACCOUNT: PREFIX_ACCOUNT, USER: PREFIX_USER}[kind]
    return public_key_bytes(key, prefix) is not None


# -- creds files -------------------------------------------------------------------------

_DECORATED = re.compile(
    r"\s*(?:(?:-{3,}.*-{3,}\r?\n)([\w\-.=]+)(?:\r?\n-{3,}.*-{3,}(\r?\n|\Z)))", re.ASCII)


def read_creds(text: str) -> tuple[str, str]:
    """The user JWT and NKey seed of a `.creds` file: the first and second decorated
    blocks, as the reference's library reads them; without blocks, the first line holding
    a JWT and the first holding a seed (SU, SA or SO) (where the library would take the
    whole text as the JWT)."""
    blocks = [m.group(1) for m in _DECORATED.finditer(text)]
    lines = [line.strip() for line in text.splitlines()]
    token = blocks[0] if blocks else next((s for s in lines if s.startswith("eyJ")), "")
    if len(blocks) > 1:
        seed = blocks[1]
    else:
        seed = next((s for s in lines if s[:2] in ("SU", "SA", "SO")), "")
    if not token or not token.startswith("eyJ"):
        raise JwtError("no JWT found in the credentials")
    if not seed:
        raise JwtError("no nkey seed found in the credentials")
    if seed[:2] not in ("SU", "SA", "SO"):
        raise JwtError("the credentials do not contain a seed nkey")
    return token, seed


def format_creds(token: str, seed: str) -> str:
    """A `.creds` file as the reference's tools write it."""
    return (f"-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n"
            "NKEYs are sensitive and should be treated as secrets.\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n"
            "*************************************************************\n")


# -- encoding (tests and tools) ----------------------------------------------------------


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jti(payload: dict[str, Any]) -> str:
    """The library's `jti`: SHA-512/256 of the standard claims, base32 without padding."""
    std = {k: payload[k] for k in ("aud", "exp", "jti", "iat", "iss", "name", "nbf", "sub")
           if payload.get(k)}
    digest = hashlib.new("sha512_256", json.dumps(std, separators=(",", ":")).encode())
    return base64.b32encode(digest.digest()).rstrip(b"=").decode()


def encode(claims: dict[str, Any], signing_seed: str | bytes, *, now: float | None = None,
           algorithm: str | None = None) -> str:
    """A JWT of `claims` (a payload: `sub`, `nats` with its `type`, ...) signed by the NKey
    seed `signing_seed`: `iss` is its public key, `iat` now unless given, `jti` the hash,
    `nats.version` 2 (v1 claims, with a top-level `type`, are signed as v1)."""
    import nkeys

    seed = signing_seed.encode() if isinstance(signing_seed, str) else signing_seed
    pair = nkeys.from_seed(seed)
    payload = dict(claims)
    v1 = "type" in payload
    if not v1:
        payload["nats"] = {**payload.get("nats", {}), "version": LIB_VERSION}
    payload["iss"] = pair.public_key.decode()
    payload.setdefault("iat", int(time.time() if now is None else now))
    payload["jti"] = ""
    payload["jti"] = _jti(payload)
    header = {"typ": "JWT", "alg": algorithm or (ALGORITHM_V1 if v1 else ALGORITHM)}
    head = _b64encode(json.dumps(header, separators=(",", ":")).encode())
    body = _b64encode(json.dumps(payload, separators=(",", ":")).encode())
    signed = body if v1 else f"{head}.{body}"
    return f"{head}.{body}.{_b64encode(pair.sign(signed.encode()))}"
