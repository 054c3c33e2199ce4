"""Operator mode: accounts from their JWTs, users from theirs (nats-server's decentralised
authentication).

The trusted operators sign account JWTs; an account's key (or one of its signing keys)
signs its users' JWTs. A client sends its user JWT and its signature of this connection's
nonce in CONNECT (a bearer token needs no signature). The server finds the account JWT
through the resolver (the preloaded ones, and for a `full` resolver its directory, which
`$SYS.REQ.CLAIMS.UPDATE` keeps), checks in the reference's order that the operator signed
it, that the user's signer belongs to it (a scoped signing key's template replaces the
user's own permissions), expiry, bearer, connection type, the nonce signature, revocation,
source network and connect times, and binds the client to that account with the
permissions and limits of its JWT. Every refusal is the reference's `Authorization
Violation`; its reason goes to the debug log.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..config import jwt
from ..config.accounts import (
    AccountConfig,
    AccountLimits,
    JetStreamLimits,
    Latency,
    MapDest,
    Mapping,
    ServiceExport,
    ServiceImport,
    StreamExport,
    StreamImport,
)
from ..config.auth import Permissions, ResponsePermission, SubjectPermission
from ..protocol.errors import ACCOUNT_AUTHENTICATION_EXPIRED, USER_AUTHENTICATION_REVOKED
from .accounts import Account, Accounts, publish_internal
from .auth import Login, Rights, nonce_signed
from .templates import TemplateError, expand

if TYPE_CHECKING:
    from ..config.operator import OperatorOptions
    from .client import ClientConnection
    from .sysaccount import SystemAccount

log = logging.getLogger("tidings.server")


class Resolver:
    """Account JWTs by account public key: the preloaded ones, and a directory's
    (`<dir>/<key>.jwt`) for the `full` and `cache` resolvers."""

    def __init__(self, options: OperatorOptions) -> None:
        resolver = options.resolver
        self.kind = resolver.kind if resolver is not None else "MEMORY"
        self.dir = resolver.dir if resolver is not None and self.kind in ("FULL", "CACHE") else ""
        self.allow_delete = bool(resolver and resolver.allow_delete)
        self.memory: dict[str, str] = dict(options.preload)
        if self.dir:
            os.makedirs(self.dir, exist_ok=True)
            for key, token in options.preload.items():
                if not os.path.exists(self._path(key)):
                    self.store(key, token)

    def _path(self, key: str) -> str:
        return os.path.join(self.dir, f"{key}.jwt")

    def fetch(self, key: str) -> str | None:
        if self.dir and jwt.is_public_key(key, jwt.ACCOUNT):
            try:
                with open(self._path(key), encoding="utf-8") as f:
                    return f.read().strip()
            except OSError:
                pass
        return self.memory.get(key)

    def store(self, key: str, token: str) -> None:
        """Keep an account JWT (a claims update): in the directory, else in memory."""
        if self.dir:
            path = self._path(key)
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(token)
            os.replace(tmp, path)
        else:
            self.memory[key] = token

    @property
    def read_only(self) -> bool:
        return self.kind == "MEMORY"

    def keys(self) -> list[str]:
        found = set(self.memory)
        if self.dir:
            found.update(name[:-4] for name in os.listdir(self.dir) if name.endswith(".jwt"))
        return sorted(found)


class OperatorAuth:
    """The operator-mode side of the Authenticator (server/auth.py)."""

    def __init__(self, accounts: Accounts, options: OperatorOptions) -> None:
        self.accounts = accounts
        self.options = options
        self.trusted = options.keys
        self.strict = any(c.strict_signing_key_usage for c in options.claims)
        self.resolver = Resolver(options)
        self.claims: dict[str, jwt.AccountClaims] = {}
        self.events: SystemAccount | None = None  # once the system account runs (serve)
        accounts.lookup = self.load_account

    # -- accounts ------------------------------------------------------------------------
    def account_claims(self, key: str, token: str | None = None) -> jwt.AccountClaims | None:
        """An account's claims, if its JWT (fetched or given) is valid and signed by a
        trusted operator."""
        token = token or self.resolver.fetch(key)
        if not token:
            return None
        try:
            claims = jwt.decode_account(token, now=0)  # expiry: checked where it matters
        except jwt.JwtError as exc:
            log.warning("account %s: JWT not valid: %s", key, exc)
            return None
        if claims.subject != key or not self._trusted_issuer(claims):
            log.warning("account %s: JWT not signed by a trusted operator", key)
            return None
        return claims

    def _trusted_issuer(self, claims: jwt.Claims) -> bool:
        if claims.issuer not in self.trusted:
            return False
        return not any(c.subject == claims.issuer and not c.did_sign(claims)
                       for c in self.options.claims)

    def load_account(self, key: str) -> Account | None:
        """The account `key` from its JWT (None: no such account, or not trusted)."""
        if not jwt.is_public_key(key, jwt.ACCOUNT):
            return None
        claims = self.account_claims(key)
        if claims is None:
            return None
        self.claims[key] = claims
        if key == self.accounts.system_account.name:
            account = self.accounts.system_account
        else:
            account = Account(key, account_config(claims))
            account.name_tag = claims.name
            self.accounts.add(account)
        if claims.expires:
            server = self.accounts.server
            delay = max(0.0, claims.expires - time.time())
            server.loop.call_later(delay, self._account_expired, account, claims.expires)
        return account

    def _account_expired(self, account: Account, expires: int) -> None:
        """Its JWT expired (and was not replaced by a later one): its clients are closed."""
        claims = self.claims.get(account.name)
        if claims is not None and claims.expires != expires:
            return
        for client in list(self.accounts.server.clients.values()):
            if client.account is account and not client.internal and not client.closed:
                client.close_reason = "Authentication Expired"
                client.close_with_error(ACCOUNT_AUTHENTICATION_EXPIRED, "account expired")

    # -- users ---------------------------------------------------------------------------
    def check(self, conn: ClientConnection, connect: dict[str, Any]) -> Login | None:
        """Who a CONNECT with a user JWT is (None: Authorization Violation)."""
        token = connect.get("jwt")
        if not isinstance(token, str) or not token:
            return self._refused(conn, "Authentication requires a user JWT")
        try:
            user = jwt.decode_user(token)
        except jwt.JwtError as exc:
            return self._refused(conn, f"User JWT not valid: {exc}")
        account_key = user.account
        account = self.accounts.find(account_key)
        claims = self.claims.get(account_key)
        if account is not None and claims is None:
            claims = self.account_claims(account_key)
            if claims is not None:
                self.claims[account_key] = claims
        if account is None or claims is None:
            return self._refused(conn, "Account JWT lookup error")
        known, scope = claims.signer_scope(user.issuer, self.strict)
        if not known:
            return self._refused(conn, "User JWT issuer is not known")
        limits = user.user
        if scope is not None:
            if not user.has_empty_permissions():
                return self._refused(conn, "User JWT is not valid: scoped user has permissions")
            try:
                limits = expand(scope.template, user, claims.name, claims.tags)
            except TemplateError as exc:
                return self._refused(conn, f"User JWT generated invalid permissions: {exc}")
        if claims.expires and claims.expires <= time.time():
            return self._refused(conn, "Account JWT has expired")
        if limits.bearer_token and claims.limits.disallow_bearer:
            return self._refused(conn, "Account does not allow bearer tokens")
        kind = "WEBSOCKET" if conn.websocket else "STANDARD"
        types = [t.upper() for t in limits.allowed_connection_types]
        known_types = [t for t in types if t in jwt.CONNECTION_TYPES]
        if types and (not known_types or kind not in known_types):
            return self._refused(conn, "Connection type not allowed")
        if not limits.bearer_token and not nonce_signed(conn.nonce, connect.get("sig"), user.subject):
            return self._refused(conn, "Signature not verified")
        if jwt.is_revoked(claims, user.subject, user.issued_at):
            return self._refused(conn, "User authentication revoked")
        effective = replace(user, user=limits)  # (a scope's template, where one applies)
        if not jwt.source_allowed(effective, conn.host):
            log.error("%s - Bad src Ip %s", conn.describe(), conn.host)
            return None
        window = jwt.connect_window(effective, time.time())
        if window is None:
            log.error("%s - Outside connect times", conn.describe())
            return None
        perms = _permissions(limits)
        if perms is None and account.config is not None:
            perms = account.config.default_permissions
        expires = float(user.expires) if user.expires else 0.0
        if window != float("inf"):
            until = time.time() + window
            expires = min(expires, until) if expires else until
        return Login(user.name or user.subject, Rights(perms) if perms else None,
                     user.subject, True, account, expires=expires, issued_at=user.issued_at,
                     name_tag=user.name,
                     max_subs=_min_limit(limits.subs, account.limits.max_subscriptions),
                     max_payload=_min_limit(limits.payload, account.limits.max_payload))

    def _refused(self, conn: ClientConnection, why: str) -> None:
        log.debug("%s - %s", conn.describe(), why)
        return None

    # -- claims updates and lookups (the system account's requests) ----------------------
    def serve(self, events: SystemAccount) -> None:
        """Answer the resolver's requests in the system account, as the reference's: an
        account JWT update (`$SYS.REQ.ACCOUNT.<key>.CLAIMS.UPDATE`, the older
        `$SYS.ACCOUNT.<key>.CLAIMS.UPDATE`, and for a full resolver `$SYS.REQ.CLAIMS.UPDATE`
        with the key taken from the JWT), and for a full resolver the lookup of one
        (`$SYS.REQ.ACCOUNT.<key>.CLAIMS.LOOKUP`) and the list (`$SYS.REQ.CLAIMS.LIST`)."""
        self.events = events
        system = events.system
        for subject in ("$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE", "$SYS.ACCOUNT.*.CLAIMS.UPDATE"):
            events._subscribe(system, subject, self._update_named)
        if self.resolver.dir:
            events._subscribe(system, "$SYS.REQ.CLAIMS.UPDATE", self._update_any)
            events._subscribe(system, "$SYS.REQ.ACCOUNT.*.CLAIMS.LOOKUP", self._lookup)
            events._subscribe(system, "$SYS.REQ.CLAIMS.LIST", self._list)

    def _update_named(self, subject: bytes, reply: bytes | None, headers: bytes | None,
                      payload: bytes) -> None:
        tokens = subject.decode(errors="replace").split(".")
        key = tokens[3] if len(tokens) == 6 else tokens[2]
        self._update(key, reply, payload)

    def _update_any(self, subject: bytes, reply: bytes | None, headers: bytes | None,
                    payload: bytes) -> None:
        self._update("", reply, payload)

    def _update(self, key: str, reply: bytes | None, payload: bytes) -> None:
        """Check, keep and apply an account JWT, and say how it went."""
        token = payload.decode(errors="replace").strip()
        if not token and key:
            return self._respond(reply, key, "jwt update error", "request body is empty")
        try:
            claims = jwt.decode_account(token, now=0)
        except jwt.JwtError as exc:
            return self._respond(reply, key or "n/a", "jwt update resulted in error", str(exc))
        key = key or claims.subject
        if claims.subject != key:
            return self._respond(reply, key, "jwt update resulted in error",
                                 "subject does not match jwt content")
        if not self._trusted_issuer(claims):
            return self._respond(reply, key, "jwt validation failed",
                                 "not signed by a trusted operator")
        loaded = self.accounts.get(key)
        if not self.resolver.dir and loaded is None:
            return self._respond(reply, key, "jwt update skipped")
        try:
            self.resolver.store(key, token)
        except OSError as exc:
            return self._respond(reply, key, "jwt update resulted in error", str(exc))
        if loaded is not None:
            self._apply(loaded, claims)
        self._respond(reply, key, "jwt updated")

    def _apply(self, account: Account, claims: jwt.AccountClaims) -> None:
        """A loaded account's newer JWT: its exports, imports and limits, the revocations
        and disallowed bearer tokens closing the connections they now refuse."""
        self.claims[account.name] = claims
        if account is not self.accounts.system_account:
            self.accounts.update(account, account_config(claims))
        for client in list(self.accounts.server.clients.values()):
            if client.account is not account or client.internal or client.closed:
                continue
            login = client.login
            if login.nkey and jwt.is_revoked(claims, login.nkey, login.issued_at):
                client.close_reason = "Authentication Revoked"
                client.close_with_error(USER_AUTHENTICATION_REVOKED, "user JWT revoked")
        if claims.expires:
            delay = max(0.0, claims.expires - time.time())
            self.accounts.server.loop.call_later(delay, self._account_expired, account,
                                                 claims.expires)

    def _respond(self, reply: bytes | None, key: str, message: str, error: str = "") -> None:
        if error:
            log.error("%s - %s - %s", message, key, error)
        else:
            log.debug("%s - %s", message, key)
        if not reply:
            return
        body: dict[str, Any] = {"server": self.events.server_info()}
        if error:
            body["error"] = {"account": key, "code": 500, "description": f"{message} - {error}"}
        else:
            body["data"] = {"account": key, "code": 200, "message": message}
        publish_internal(self.accounts.server, self.events.system, reply,
                         json.dumps(body, separators=(",", ":")).encode())

    def _lookup(self, subject: bytes, reply: bytes | None, headers: bytes | None,
                payload: bytes) -> None:
        tokens = subject.decode(errors="replace").split(".")
        if not reply or len(tokens) != 6:
            return
        token = self.resolver.fetch(tokens[3]) or ""
        publish_internal(self.accounts.server, self.events.system, reply, token.encode())

    def _list(self, subject: bytes, reply: bytes | None, headers: bytes | None,
              payload: bytes) -> None:
        if not reply:
            return
        body = {"server": self.events.server_info(), "data": self.resolver.keys()}
        publish_internal(self.accounts.server, self.events.system, reply,
                         json.dumps(body, separators=(",", ":")).encode())


def _min_limit(a: int, b: int) -> int:
    """The tighter of two limits (-1: none)."""
    if a < 0:
        return b
    if b < 0:
        return a
    return min(a, b)


def _permissions(limits: jwt.UserPermissionLimits) -> Permissions | None:
    """A user JWT's permissions as the configuration's (None: it has none)."""
    pub, sub, resp = limits.pub, limits.sub, limits.resp
    if not (pub.allow or pub.deny or sub.allow or sub.deny or resp is not None):
        return None

    def side(perm: jwt.Permission) -> SubjectPermission | None:
        if not perm.allow and not perm.deny:
            return None
        return SubjectPermission(perm.allow or None, perm.deny)

    responses = None
    if resp is not None:
        responses = ResponsePermission(resp.max_msgs or 1, resp.expires or 120.0)
    return Permissions(side(pub), side(sub), responses)


def account_config(claims: jwt.AccountClaims) -> AccountConfig:
    """An account JWT's exports, imports, limits and default permissions, as the
    configuration's accounts give them (the reference's reading of JWT imports)."""
    exports: list[StreamExport | ServiceExport] = []
    for exp in claims.exports:
        if exp.token_req:
            log.warning("account %s: export %r needs activation tokens, not supported by "
                        "tidings yet: not exported", claims.subject, exp.subject)
            continue
        if exp.type == "stream":
            exports.append(StreamExport(exp.subject))
        else:
            latency = None
            if exp.latency is not None:
                latency = Latency(exp.latency.sampling, exp.latency.results)
            exports.append(ServiceExport(
                exp.subject, response_type=exp.response_type or "Singleton",
                response_threshold=exp.response_threshold or 120.0, latency=latency,
                allow_trace=exp.allow_trace))
    imports: list[StreamImport | ServiceImport] = []
    for imp in claims.imports:
        if imp.type == "stream":
            if imp.local_subject:
                imports.append(StreamImport(imp.account, imp.subject, to=imp.local_subject))
            else:
                imports.append(StreamImport(imp.account, imp.subject, prefix=imp.to))
        elif imp.local_subject:
            imports.append(ServiceImport(imp.account, imp.subject, to=imp.local_subject,
                                         share=imp.share))
        else:
            # As the reference reads a JWT service import without local_subject: `subject`
            # is where the importer publishes, `to` (if any) the exporter's subject.
            imports.append(ServiceImport(imp.account, imp.to or imp.subject, to=imp.subject,
                                         share=imp.share))
    lim = claims.limits
    limits = AccountLimits(max_connections=lim.conn, max_subscriptions=lim.subs,
                           max_payload=lim.payload, max_leafnodes=lim.leaf)
    defaults = _permissions(jwt.UserPermissionLimits(
        pub=claims.default_permissions.pub, sub=claims.default_permissions.sub,
        resp=claims.default_permissions.resp))
    config = AccountConfig(claims.subject, claims.subject, exports, imports, limits, defaults)
    config.mappings = tuple(  # (each weight as the reference reads it: 0 is 100)
        Mapping(source, tuple(MapDest(d.subject, d.get_weight(), d.cluster) for d in dests))
        for source, dests in claims.mappings.items())
    js = _jetstream_limits(lim.jetstream)
    if js is not None:
        config.jetstream, config.jetstream_limits = True, js
    return config


def _jetstream_limits(claim: dict[str, Any]) -> JetStreamLimits | None:
    """An account JWT's JetStream limits (None: JetStream off), as the reference reads
    them: on when memory or disk storage is not 0 (in a tier, its R1 tier's)."""
    def unlimited(value: Any) -> int:
        return int(value) if isinstance(value, int) and value > 0 else -1

    tier = ""
    tiers = claim.get("tiered_limits")
    if isinstance(tiers, dict) and tiers:
        tier = "R1" if "R1" in tiers else sorted(tiers)[0]
        claim = tiers[tier] if isinstance(tiers[tier], dict) else {}
    if not claim.get("mem_storage") and not claim.get("disk_storage"):
        return None
    return JetStreamLimits(
        max_memory=int(claim.get("mem_storage") or 0), max_storage=int(claim.get("disk_storage") or 0),
        max_streams=int(claim.get("streams") or 0), max_consumers=int(claim.get("consumer") or 0),
        max_ack_pending=unlimited(claim.get("max_ack_pending")),
        memory_max_stream_bytes=unlimited(claim.get("mem_max_stream_bytes")),
        storage_max_stream_bytes=unlimited(claim.get("disk_max_stream_bytes")),
        max_bytes_required=bool(claim.get("max_bytes_required")), tier=tier)
