"""Who a client is and what it may do, as nats-server decides it.

`Authenticator` is built from the options (again on reload). For a CONNECT it finds the user
the reference would find, in the reference's order: an NKey (its signature over this
connection's nonce), a user named by the client certificate (verify_and_map), a user and
password (plain, or a bcrypt hash), then the single user or token of the authorization block.
A bcrypt comparison costs tens of milliseconds: it runs in a thread (`Bcrypt`), and the
connection waits for it without holding up anyone else.

`Rights` are a user's permissions, compiled once and shared by that user's connections:
publish and subscribe allow/deny lists (deny wins), with bounded caches of the answers, and
the reply subjects a client with allow_responses may publish to.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import os
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config.auth import (
    Permissions,
    ResponsePermission,
    SubjectPermission,
    User,
    user_nkey_bytes,
)
from ..protocol.subjects import subject_matches

if TYPE_CHECKING:
    from ..config.server import ServerOptions
    from .accounts import Account, Accounts
    from .client import ClientConnection
    from .operator import OperatorAuth

log = logging.getLogger("tidings.server")

# As the reference's isBcrypt.
_BCRYPT = re.compile(r"^\$2[abxy]\$\d{2}\$")
# Cached answers per user, as the reference bounds its per-client caches (it keeps 128).
MAX_CACHE = 4096
# Reply subjects a client with allow_responses may still answer, at most (oldest dropped).
MAX_REPLIES = 4096
# bcrypt comparisons queued at most; past that a login is refused at once.
MAX_PENDING_CHECKS = 256


def is_bcrypt(password: str) -> bool:
    return password.startswith("$") and _BCRYPT.match(password) is not None


def same(given: Any, expected: str) -> bool:
    """Constant-time equality of a client's string with a configured secret."""
    return isinstance(given, str) and hmac.compare_digest(given.encode(), expected.encode())


def new_nonce() -> str:
    """A per-connection nonce as the reference makes it: 11 random bytes, base64url."""
    return base64.urlsafe_b64encode(secrets.token_bytes(11)).rstrip(b"=").decode()


# -- permissions ---------------------------------------------------------------------------
class SubjectList:
    """One allow or deny list: plain subject patterns, and "subject queue" entries."""

    __slots__ = ("plain", "queued")

    def __init__(self, entries: Iterable[str]) -> None:
        self.plain: list[bytes] = []
        self.queued: list[tuple[bytes, bytes]] = []
        for entry in entries:
            fields = entry.split()
            if len(fields) == 2:
                self.queued.append((fields[0].encode(), fields[1].encode()))
            else:
                self.plain.append(entry.encode())

    def plain_match(self, subject: bytes) -> bool:
        return any(subject_matches(p, subject) for p in self.plain)

    def queue_verdict(self, subject: bytes, queue: bytes) -> bool | None:
        """None when no queue entry is for `subject`; else whether one names `queue`."""
        found = False
        for pattern, group in self.queued:
            if subject_matches(pattern, subject):
                found = True
                if subject_matches(group, queue):
                    return True
        return False if found else None


def _list(entries: tuple[str, ...] | None) -> SubjectList | None:
    return None if entries is None else SubjectList(entries)


class Rights:
    """A user's permissions, compiled; see the module docstring."""

    def __init__(self, perms: Permissions) -> None:
        pub = perms.publish or SubjectPermission()
        sub = perms.subscribe or SubjectPermission()
        self.responses: ResponsePermission | None = perms.responses
        pub_allow = pub.allow
        if self.responses is not None and pub_allow is None:
            pub_allow = ()  # allow_responses turns the blanket publish allow off
        self.pub_allow = _list(pub_allow)
        self.pub_deny = SubjectList(pub.deny) if pub.deny else None
        self.sub_allow = _list(sub.allow)
        self.sub_deny = SubjectList(sub.deny) if sub.deny else None
        self.limits_publish = self.pub_allow is not None or self.pub_deny is not None
        self.limits_subscribe = self.sub_allow is not None or self.sub_deny is not None
        self._pub_cache: dict[bytes, bool] = {}
        self._recv_cache: dict[tuple[bytes, bytes | None], bool] = {}

    def may_publish(self, subject: bytes) -> bool:
        """Whether the lists let `subject` be published to (replies aside)."""
        known = self._pub_cache.get(subject)
        if known is not None:
            return known
        allowed = self.pub_allow is None or self.pub_allow.plain_match(subject)
        if allowed and self.pub_deny is not None:
            allowed = not self.pub_deny.plain_match(subject)
        cache = self._pub_cache
        if len(cache) >= MAX_CACHE:
            cache.clear()
        cache[subject] = allowed
        return allowed

    def may_subscribe(self, subject: bytes, queue: bytes | None) -> bool:
        """The reference's check of a SUB: a wildcard subject is matched token by token as if
        literal, and a queue entry for the subject decides for a queue subscription."""
        allowed = True
        if self.sub_allow is not None:
            allowed = self.sub_allow.plain_match(subject)
            if queue is not None:
                verdict = self.sub_allow.queue_verdict(subject, queue)
                if verdict is not None:
                    allowed = verdict
        if allowed and self.sub_deny is not None:
            allowed = not self.sub_deny.plain_match(subject)
            if allowed and queue is not None:
                allowed = not self.sub_deny.queue_verdict(subject, queue)
        return allowed

    def may_receive(self, subject: bytes, queue: bytes | None) -> bool:
        """Whether a message on `subject` may reach a wildcard subscription of this user: the
        subscribe lists applied to the message's own subject. Asked only when a subject's
        match result is built (the subject index caches it), never per message."""
        key = (subject, queue)
        known = self._recv_cache.get(key)
        if known is None:
            known = self.may_subscribe(subject, queue)
            if len(self._recv_cache) >= MAX_CACHE:
                self._recv_cache.clear()
            self._recv_cache[key] = known
        return known


class Replies:
    """The reply subjects a client with allow_responses was sent, each usable `max_msgs`
    times within `expires` seconds (negative: no limit), at most MAX_REPLIES of them."""

    __slots__ = ("limits", "seen")

    def __init__(self, limits: ResponsePermission) -> None:
        self.limits = limits
        self.seen: OrderedDict[bytes, list[float]] = OrderedDict()  # reply -> [uses, when]

    def add(self, reply: bytes) -> None:
        seen = self.seen
        seen[reply] = [0, time.monotonic()]
        seen.move_to_end(reply)
        if len(seen) > MAX_REPLIES:
            seen.popitem(last=False)

    def use(self, reply: bytes) -> bool:
        entry = self.seen.get(reply)
        if entry is None:
            return False
        limits = self.limits
        if limits.expires > 0 and time.monotonic() - entry[1] > limits.expires:
            del self.seen[reply]
            return False
        entry[0] += 1
        if limits.max_msgs > 0 and entry[0] >= limits.max_msgs:
            del self.seen[reply]
        return True


def granting(deliver: Callable[..., bool], reply: bytes) -> Callable[..., bool]:
    """`deliver`, also granting `reply` to each client with allow_responses that a message
    is delivered to: as in the reference, only a delivery grants it (not a message the
    client sent itself with echo off, not the other members of a queue group, not a
    trace-only message). Used for messages with a reply while such clients are connected."""

    def deliver_granting(pub: Any, sub: Any, frame: Any, plain_frame: Any) -> bool:
        if not deliver(pub, sub, frame, plain_frame):
            return False
        replies = getattr(sub.client, "replies", None)
        if replies is not None:
            replies.add(reply)
        return True

    return deliver_granting


# -- authentication ------------------------------------------------------------------------
@dataclass(frozen=True)
class Login:
    """Who a connection turned out to be: a name for logs and /connz, and its rights (None:
    may do anything)."""

    user: str = ""
    rights: Rights | None = None
    nkey: str = ""
    listed: bool = False  # one of the users (or nkeys) array's
    account: Account | None = None  # the account it belongs to (None: the global one)
    expires: float = 0.0  # when its credentials expire (Unix time; 0: never)
    issued_at: int = 0  # its user JWT's (revocations are judged by it)
    name_tag: str = ""  # its user JWT's name (in the system account's client details)
    max_subs: int = -1  # subscriptions per connection (-1: no limit)
    max_payload: int = -1  # below the server's max_payload (-1: no limit of its own)


ANONYMOUS = Login()


@dataclass(frozen=True)
class PasswordCheck:
    """A bcrypt comparison still to be made; `login` if it succeeds."""

    hashed: str
    password: str
    login: Login


class Bcrypt:
    """bcrypt comparisons in a thread, so that the event loop serves the other clients
    meanwhile; successful ones remembered (keyed by an HMAC under a per-process key, never
    the password) so that a reconnecting client costs one hash, not one per attempt."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._key = secrets.token_bytes(32)
        self._good: OrderedDict[bytes, None] = OrderedDict()
        self.pending = 0

    def _digest(self, hashed: str, password: str) -> bytes:
        return hmac.new(self._key, f"{hashed}\0{password}".encode(), hashlib.sha256).digest()

    def check(self, hashed: str, password: str, done: Callable[[bool], None]) -> None:
        """Compare, calling `done(ok)` on the event loop (at once when known or too busy)."""
        digest = self._digest(hashed, password)
        if digest in self._good:
            done(True)
            return
        if self.pending >= MAX_PENDING_CHECKS:
            log.warning("too many password checks waiting (%d): login refused", self.pending)
            done(False)
            return
        import bcrypt

        if self._pool is None:
            # bcrypt lets go of the GIL: all cores but the event loop's compare at once.
            workers = max(1, (os.cpu_count() or 2) - 1)
            self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bcrypt")
        self.pending += 1
        loop = asyncio.get_running_loop()

        def compare() -> bool:
            try:
                return bcrypt.checkpw(password.encode(), hashed.encode())
            except ValueError:  # not a hash bcrypt can read
                return False

        def finished(future: asyncio.Future[bool]) -> None:
            self.pending -= 1
            ok = not future.cancelled() and future.exception() is None and future.result()
            if ok:
                self._good[digest] = None
                if len(self._good) > MAX_CACHE:
                    self._good.popitem(last=False)
            done(bool(ok))

        loop.run_in_executor(self._pool, compare).add_done_callback(finished)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


Verdict = Login | PasswordCheck | None


class Authenticator:
    """The server's users and how a CONNECT is checked against them (see the module
    docstring). Rebuilt from the options on reload."""

    def __init__(self, options: ServerOptions, accounts: Accounts | None = None,
                 operator: OperatorAuth | None = None) -> None:
        auth = options.auth
        self.options = options
        default = auth.default_permissions
        self.users: dict[str, tuple[User, Login]] = {}
        self.nkeys: dict[str, tuple[User, Login]] = {}
        for user in auth.users:
            # (an account's users have their account's defaults from the configuration)
            perms = user.permissions or (default if not user.account else None)
            rights = Rights(perms) if perms is not None else None
            account = accounts.get(user.account) if accounts is not None else None
            # An account's limits on each of its connections (as the reference's msubs, mpay).
            limits = account.limits if account is not None else None
            subs = limits.max_subscriptions if limits is not None else -1
            payload = limits.max_payload if limits is not None else -1
            if user.nkey:
                self.nkeys[user.nkey] = (user, Login(
                    user.nkey, rights, user.nkey, True, account, max_subs=subs,
                    max_payload=payload))
            else:
                self.users[user.name] = (user, Login(
                    user.name, rights, listed=True, account=account, max_subs=subs,
                    max_payload=payload))
        self.required = options.auth_required
        # Operator mode: users are JWTs signed for accounts the operator signed.
        self.operator = operator
        if operator is not None:
            self.required = True
        ws = options.websocket
        self.ws_override = ws is not None and bool(ws.user or ws.token or ws.no_auth_user)
        self.nonce_required = bool(self.nkeys) or self.operator is not None
        self.tls_map = options.tls is not None and options.tls.verify_and_map
        self.ws_tls_map = bool(ws and ws.tls and ws.tls.verify_and_map)

    def knows(self, login: Login) -> bool:
        """Whether a user of the users array is (still) one."""
        return (login.nkey in self.nkeys) if login.nkey else (login.user in self.users)

    def required_for(self, conn: ClientConnection) -> bool:
        if conn.internal:
            return False  # the process's own client (Server.dial_internal)
        return self.required or (conn.websocket and self.ws_override)

    def check(self, conn: ClientConnection, connect: dict[str, Any]) -> Verdict:
        """Who the CONNECT `connect` of `conn` is: a Login, a PasswordCheck still to make,
        or None (refused)."""
        if not self.required_for(conn):
            return ANONYMOUS
        if self.operator is not None:
            return self.operator.check(conn, connect)
        opts, ws = self.options, conn.websocket and self.ws_override
        wso = opts.websocket
        if ws and wso is not None:
            no_auth_user, username, password, token = (
                wso.no_auth_user, wso.user, wso.password, wso.token)
        else:
            no_auth_user, username, password, token = (
                opts.auth.no_auth_user, opts.user, opts.password, opts.token)
        kind = "WEBSOCKET" if conn.websocket else "STANDARD"
        sent_user = connect.get("user") or ""
        sent_nkey = connect.get("nkey") or ""
        anonymous = not (sent_user or connect.get("pass") or connect.get("auth_token")
                         or sent_nkey)
        # A client that sent no credentials is taken for the no_auth_user; from there on it
        # is checked as that user would be (its allowed connection types first).
        default = no_auth_user if anonymous else ""
        if self.nkeys:
            name = sent_nkey or (default if default in self.nkeys else "")
            if name:
                found = _usable(self.nkeys, name, kind)
                if found is None:
                    return None
                if name != sent_nkey:
                    return found[1]  # the no_auth_user: there is no signature to check
                return (found[1] if nonce_signed(conn.nonce, connect.get("sig"), sent_nkey)
                        else None)
        if self.users:
            if self.ws_tls_map if conn.websocket else self.tls_map:
                for name in conn.tls_identities or ():
                    found = _usable(self.users, name, kind)
                    if found is not None:
                        return found[1]
                return None
            name = sent_user or (default if default in self.users else "")
            if name:
                found = _usable(self.users, name, kind)
                if found is None:
                    return None
                user, login = found
                if name != sent_user:
                    return login  # the no_auth_user: there is no password to compare
                if not user.password and (self.tls_map or self.ws_tls_map):
                    return None  # a certificate-only identity
                return _compare(user.password, connect.get("pass"), login)
        if token:
            return _compare(token, connect.get("auth_token"), ANONYMOUS)
        if username:
            if not same(sent_user, username):
                return None
            return _compare(password, connect.get("pass"), Login(username))
        return None


def nonce_signed(nonce: str, sig: Any, user_key: str) -> bool:
    """Whether `sig` (base64url, or standard base64, as CONNECT carries it) is the user
    NKey `user_key`'s signature of this connection's `nonce`."""
    if not isinstance(sig, str) or not sig or not nonce:
        return False
    try:
        raw = base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4))
    except ValueError:
        try:
            raw = base64.b64decode(sig, validate=True)
        except ValueError:
            return False
    key = user_nkey_bytes(user_key)
    if key is None:
        return False
    from nacl.exceptions import BadSignatureError
    from nacl.signing import VerifyKey

    try:
        VerifyKey(key).verify(nonce.encode(), raw)
    except (BadSignatureError, ValueError, TypeError):
        return False
    return True


def _usable(table: dict[str, tuple[User, Login]], name: str,
            kind: str) -> tuple[User, Login] | None:
    """The user `name` of `table` if it may connect over a connection of `kind`."""
    found = table.get(name)
    if found is None:
        return None
    types = found[0].connection_types
    return found if not types or kind in types else None


def _compare(expected: str, given: Any, login: Login) -> Verdict:
    if not isinstance(given, str):
        given = ""
    if is_bcrypt(expected):
        return PasswordCheck(expected, given, login)
    return login if same(given, expected) else None
