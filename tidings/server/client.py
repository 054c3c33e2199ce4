"""One client connection on the server: protocol handler, routing of its publishes, limits.

Outbound bytes are collected per connection in `out` and written once per read of the
publisher (see Server.flush), so a burst of messages costs one socket write per receiver.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config.server import MAX_PAYLOAD_LIMIT
from ..protocol import encode
from ..protocol.errors import (
    AUTHORIZATION_VIOLATION,
    INVALID_CLIENT_PROTOCOL,
    INVALID_SUBJECT,
    MAX_SUBSCRIPTIONS_EXCEEDED,
    NO_RESPONDERS_REQUIRES_HEADERS,
    USER_AUTHENTICATION_EXPIRED,
    ProtocolError,
)
from ..protocol.parser import ClientOpParser
from ..protocol.subjects import has_wildcard, is_valid_subscription
from .auth import ANONYMOUS, Login, PasswordCheck, Replies, Rights
from .connection import Connection, Headerless, msg_frame
from .sublist import EMPTY_RESULT, Subscription

if TYPE_CHECKING:
    from .msgtrace import MsgTrace
    from .server import Server

log = logging.getLogger("tidings.server")

OK = encode.OK
PONG = encode.PONG

# CONNECT fields and the JSON types the reference accepts for them.
_CONNECT_TYPES: dict[str, type | tuple[type, ...]] = {
    "verbose": bool,
    "pedantic": bool,
    "tls_required": bool,
    "echo": bool,
    "headers": bool,
    "no_responders": bool,
    "protocol": int,
    "name": str,
    "lang": str,
    "version": str,
    "user": str,
    "pass": str,
    "auth_token": str,
    "jwt": str,
    "nkey": str,
    "sig": str,
    "account": str,
    "new_account": bool,
    "remote_account": str,
    "proxy_sig": str,
    "import": dict,
    "export": dict,
}
_INT64 = 1 << 63


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_connect(arg: bytes) -> dict[str, Any]:
    """The CONNECT options as Go's encoding/json fills the reference's struct: names match
    case-insensitively (the last one wins), null leaves a field alone, unknown names are
    ignored, a value of the wrong JSON type (or an int out of int64 range) is an error,
    invalid UTF-8 is replaced rather than refused. Raises ProtocolError (close, no -ERR)."""
    try:
        raw: Any = json.loads(arg.decode("utf-8", "replace"), parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(None, f"bad CONNECT JSON: {arg[:64]!r}") from exc
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProtocolError(None, "CONNECT is not a JSON object")
    opts: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.lower()
        kind = _CONNECT_TYPES.get(name)
        if kind is None or value is None:
            continue
        if not isinstance(value, kind) or (
            kind is int and (isinstance(value, bool) or not -_INT64 <= value < _INT64)
        ):
            raise ProtocolError(None, f"CONNECT field {key} has the wrong type")
        opts[name] = value
    return opts


def _quoted(value: bytes) -> str:
    """As Go's %q prints a subject."""
    return json.dumps(value.decode("utf-8", "replace"), ensure_ascii=False)


def auth_user(opts: dict[str, Any]) -> str:
    """Who a CONNECT claims to be, as the reference logs it (never the secret)."""
    if isinstance(opts.get("nkey"), str) and opts["nkey"]:
        return f"Nkey {_quoted(opts['nkey'].encode())}"
    if isinstance(opts.get("user"), str) and opts["user"]:
        return f"User {_quoted(opts['user'].encode())}"
    if opts.get("auth_token"):
        return 'Token "[REDACTED]"'
    return 'User "N/A"'


# The control line an internal client may send (its subjects and replies are not the
# clients', and max_control_line bounds the clients).
INTERNAL_CONTROL_LINE = 64 * 1024

# The interest cache the compiled PUB scanner reads for a client whose publishes are mapped:
# empty, so that it skips none (it only reads it).
_NEVER_UNROUTED: dict[bytes, Any] = {}
PubHandler = Callable[[bytes, bytes | None, bytes], None]
# Replies a client may not give, each from a length on (the reference's isReservedReply).
_RESERVED_REPLIES = ((b"_R_.", 4), (b"$JS.ACK.", 9), (b"_GR_.", 6))
# Their prefixes: one test tells a reply that may be reserved (only such a one pays for the
# full check; not the common `_INBOX.` one).
_RESERVED_PREFIXES = tuple(prefix for prefix, _ in _RESERVED_REPLIES)

# The first server PING after CONNECT.
FIRST_PING_INTERVAL = 2.0


class ClientConnection(Connection):
    """The server side of one client's TCP connection."""

    skips_unrouted = True  # the parser may skip publishes nobody listens to

    __slots__ = (
        "verbose", "pedantic", "no_responders", "protocol", "lang", "version", "credentials",
        "first_pong_sent", "websocket", "tls_identities", "nonce", "login", "rights",
        "replies", "internal", "max_subs", "expiry_timer",
    )

    def __init__(self, server: Server) -> None:
        super().__init__(server)
        opts = server.options
        self.parser = ClientOpParser(
            self, opts.max_payload, opts.max_control_line,
            interest=(self.account.sublist.cache, EMPTY_RESULT),
        )
        self.parser.pedantic = True
        # The reference's defaults before (and for fields absent from) CONNECT.
        self.verbose = True
        self.pedantic = True
        self.no_responders = False
        self.protocol = 0
        self.lang = ""
        self.version = ""
        self.first_pong_sent = False
        self.credentials: dict[str, Any] = {}  # CONNECT's user/pass/auth_token (for reload)
        self.websocket = False  # came in through the WebSocket listener (websocket.py)
        # With TLS verify_and_map: the names the client's certificate gives, in the order
        # the reference tries them as user names (tls.py).
        self.tls_identities: list[str] | None = None
        self.nonce = ""  # in INFO when NKeys are configured: the client signs it
        self.login: Login = ANONYMOUS  # who CONNECT said we are (auth.py)
        self.rights: Rights | None = None  # what we may do; None: anything
        self.replies: Replies | None = None  # allow_responses: the replies we may send
        # An in-process client of this server (Server.dial_internal): the process's own
        # identity, which no authentication, permission or TLS requirement applies to.
        self.internal = False
        self.max_subs = -1  # subscriptions it may have (its JWT's or account's; -1: any)
        self.expiry_timer: asyncio.TimerHandle | None = None  # its credentials expire
        if self.account.mappings is not None:
            self.bind_publishing()  # (a PUB before CONNECT, when no login is required)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.accepted(transport)
        server = self.server
        opts = server.options
        secure = server.tls_context is not None and not self.websocket and not self.internal
        if secure:
            # From the TLS listener: INFO went before (tls_session.py), and the handshake is
            # over (or, with allow_non_tls, the client chose to stay in the clear).
            from .tls_session import tls_established

            tls_established(self, transport)
        else:
            transport.write(server.info_for(self))  # type: ignore[attr-defined]
        if not server.register(self):
            return
        if log.isEnabledFor(logging.DEBUG) and not secure:
            log.debug("%s - Client connection created", self.describe())
        loop = server.loop
        self.ping_timer = loop.call_later(opts.ping_interval, self._ping_tick)
        if server.auth.required_for(self):
            self.parser.awaiting_connect = True
            timeout = opts.auth_timeout
            ws = opts.websocket
            if self.websocket and ws is not None and ws.auth_timeout > 0:
                timeout = ws.auth_timeout  # the websocket block's own authorization timeout
            self.auth_timer = loop.call_later(timeout, self._auth_expired)

    def make_internal(self) -> None:
        """Make this the process's own client (Server.dial_internal), before it is
        connected: what the configuration bounds for clients does not bound it either. The
        embedded streaming server relays clients' messages with its own protocol around them
        (a delivery is a little larger than what was published), and its subjects and
        replies are longer than most."""
        self.internal = True
        self.parser.max_payload = MAX_PAYLOAD_LIMIT
        self.parser.max_control_line = max(self.parser.max_control_line, INTERNAL_CONTROL_LINE)

    def past_max_pending(self) -> bool:
        """An internal client is not closed as a slow consumer: its producers stall until
        it has read (flow.py), as a route's do."""
        if self.internal:
            return False
        return super().past_max_pending()

    def gone(self) -> None:
        self.gone_timers()
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s - Client connection closed", self.describe())
        self.server.unregister(self)

    def describe(self) -> str:
        """As the reference names a client in its log: "ip:port - cid:N" ("wid:N" over
        WebSocket)."""
        return f"{self.host}:{self.port} - {'wid' if self.websocket else 'cid'}:{self.cid}"

    # -- ClientOpHandler -----------------------------------------------------
    def on_connect(self, arg: bytes) -> None:
        opts = decode_connect(arg)
        server = self.server
        # As the reference: the round trip estimated as the time from accepting to CONNECT,
        # until a PONG measures it (/connz, the system account's events).
        self.rtt = max(time.time() - self.started, 1e-9)
        if self.connected:
            # A second CONNECT starts over: the reference drops every subscription.
            for sub in list(self.subs.values()):
                self.remove_sub(sub)
        verdict = server.auth.check(self, opts)
        if isinstance(verdict, PasswordCheck):
            # A bcrypt hash: compared in a thread, our input held until it is done.
            self.parser.paused = True
            server.bcrypt.check(verdict.hashed, verdict.password,
                                lambda ok: self._password_checked(opts, verdict.login, ok))
            return
        self._authenticated(opts, verdict)

    def _password_checked(self, opts: dict[str, Any], login: Login, ok: bool) -> None:
        if self.closed:
            return
        self.parser.paused = False
        try:
            self._authenticated(opts, login if ok else None)
        except ProtocolError as exc:
            self.close_with_error(exc.err, str(exc))
            return
        self.server.flush()
        self.resume_input()

    def _authenticated(self, opts: dict[str, Any], login: Login | None) -> None:
        """The rest of CONNECT, once we know who the client is (None: nobody we know)."""
        server = self.server
        if self.auth_timer is not None:
            self.auth_timer.cancel()
            self.auth_timer = None
        self.credentials = {k: opts[k] for k in ("user", "pass", "auth_token", "nkey", "sig")
                            if k in opts}
        # Who it says it is, also when the login fails (/connz, the system account's events).
        self.name = opts.get("name", self.name)
        self.lang = opts.get("lang", self.lang)
        self.version = opts.get("version", self.version)
        if login is None:
            # As the reference: the attempt is logged, never the secret.
            log.error("%s - authentication error - %s", self.describe(), auth_user(opts))
            raise ProtocolError(AUTHORIZATION_VIOLATION, "authorization violation")
        if opts.get("account") or opts.get("new_account"):
            # The reference no longer lets a client pick or create an account this way.
            raise ProtocolError(AUTHORIZATION_VIOLATION, "account in CONNECT")
        self.grant(login)
        self.parser.awaiting_connect = False
        self.connected = True
        # The reference restarts its ping timer on CONNECT with a short first interval (2s,
        # plus up to 20%), so a new client gets its first PING early.
        if self.ping_timer is not None:
            self.ping_timer.cancel()
            first = min(server.options.ping_interval, FIRST_PING_INTERVAL)
            self.ping_timer = server.loop.call_later(
                first * (1 + random.random() / 5), self._ping_tick
            )
        self.verbose = opts.get("verbose", self.verbose)
        self.pedantic = self.parser.pedantic = opts.get("pedantic", self.pedantic)
        self.echo = opts.get("echo", self.echo)
        self.headers = self.parser.headers = bool(opts.get("headers", self.headers))
        self.no_responders = opts.get("no_responders", self.no_responders)
        self.protocol = opts.get("protocol", self.protocol)
        if self.protocol < 0 or self.protocol > 1:
            raise ProtocolError(INVALID_CLIENT_PROTOCOL)
        if self.no_responders and not self.headers:
            raise ProtocolError(NO_RESPONDERS_REQUIRES_HEADERS)
        self.parser.bulk = not self.verbose and not self.pedantic
        self.parser.keep_replies = bool(self.no_responders)
        if self.verbose:
            self.queue(OK)
        if server.events is not None:
            server.events.connected(self)

    def grant(self, login: Login) -> None:
        """Take `login`'s rights (at CONNECT, and again when a reload changes them)."""
        self.login = login
        if login.account is not self.account and login.account is not None:
            self.server.move_to_account(self, login.account)
        self._limit(login)
        rights = self.rights = login.rights
        self.bind_publishing()  # (with its account's interest cache)
        responses = rights.responses if rights is not None else None
        had = self.replies is not None
        if responses is None:
            self.replies = None
        elif self.replies is None or self.replies.limits != responses:
            self.replies = Replies(responses)
        self.server.responders += (self.replies is not None) - had

    def bind_publishing(self) -> None:
        """The path the parser hands our PUBs to: through our account's subject mappings
        if it has some, else through our publish permissions if they limit us, else
        straight to routing. The parser's compiled path skips publishes nobody listens to
        (on the subject as published): a client whose publishes are checked must have each
        one seen; one whose publishes are mapped keeps the compiled path with an interest
        cache that never says "nobody" (the mapped subject may have listeners)."""
        self.parser.route_pubs_to(*self.publish_path())

    def publish_path(self) -> tuple[PubHandler, bool]:
        """bind_publishing's choice (the parser told which interest cache to read): the
        handler of our PUBs and whether the compiled path may skip those nobody listens to."""
        parser = self.parser
        if self.account.mappings is not None:
            parser.watch_interest((_NEVER_UNROUTED, EMPTY_RESULT))
            return self._mapped_pub, self.skips_unrouted
        parser.watch_interest((self.account.sublist.cache, EMPTY_RESULT))
        rights = self.rights
        checked = rights is not None and rights.limits_publish
        return (self._checked_pub if checked else self.on_pub,
                self.skips_unrouted and not checked)

    def _limit(self, login: Login) -> None:
        """The login's own limits: subscriptions, payload, and when it expires."""
        self.max_subs = login.max_subs
        if login.max_payload >= 0 and not self.internal:
            self.parser.max_payload = min(self.server.options.max_payload, login.max_payload)
        if self.expiry_timer is not None:
            self.expiry_timer.cancel()
            self.expiry_timer = None
        if login.expires:
            delay = max(0.0, login.expires - time.time())
            self.expiry_timer = self.server.loop.call_later(delay, self._credentials_expired)
        if 0 <= self.max_subs <= len(self.subs):
            # As the reference: a login that may have no (more) subscriptions is closed.
            log.error("%s - %s", self.describe(), MAX_SUBSCRIPTIONS_EXCEEDED)
            self.close_with_error(MAX_SUBSCRIPTIONS_EXCEEDED, "no subscriptions allowed")

    def _credentials_expired(self) -> None:
        self.expiry_timer = None
        if not self.closed:
            self.close_reason = "Authentication Expired"
            self.close_with_error(USER_AUTHENTICATION_EXPIRED, "credentials expired")

    def gone_timers(self) -> None:
        if self.expiry_timer is not None:
            self.expiry_timer.cancel()
            self.expiry_timer = None

    def on_ping(self) -> None:
        self.queue(PONG)
        if self.connected and not self.first_pong_sent:
            self.first_pong_sent = True
            if self.protocol >= 1:
                self.queue(self.server.info_for(self, connect_info=True))

    def on_sub(self, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        if sid not in self.subs:
            if not is_valid_subscription(subject):
                self.send_err(INVALID_SUBJECT)
                return
            rights = self.rights
            guard = None
            if rights is not None and rights.limits_subscribe:
                if not rights.may_subscribe(subject, queue):
                    self.subscription_refused(subject, queue, sid)
                    return
                if has_wildcard(subject):
                    guard = rights.may_receive
            if 0 <= self.max_subs <= len(self.subs):
                log.error("%s - %s", self.describe(), MAX_SUBSCRIPTIONS_EXCEEDED)
                self.send_err(MAX_SUBSCRIPTIONS_EXCEEDED)
                return
            sub = Subscription(self, subject, queue, sid)
            sub.guard = guard
            self.subs[sid] = sub
            self.account.sublist.insert(sub)
        if self.verbose:
            self.queue(OK)

    def authorized_user(self) -> str:
        """Who the client logged in as, as the reference's /connz?auth=1 shows it: the
        nkey, the user (also one taken from a certificate or no_auth_user), or a redacted
        token."""
        login, sent = self.login, self.credentials
        if login.nkey:
            return login.nkey
        if login.user or sent.get("user"):
            return login.user or str(sent["user"])
        return "[REDACTED]" if sent.get("auth_token") else ""

    def subscription_refused(self, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        """-ERR and a log line in the reference's words; the connection stays."""
        subj = _quoted(subject)
        if queue is None:
            self.send_err(f"Permissions Violation for Subscription to {subj}")
            log.error("%s - Subscription Violation - Subject %s, SID %s",
                      self.describe(), subj, sid.decode("utf-8", "replace"))
        else:
            q = _quoted(queue)
            self.send_err(f"Permissions Violation for Subscription to {subj} using queue {q}")
            log.error("%s - Subscription Violation - Subject %s, Queue: %s, SID %s",
                      self.describe(), subj, q, sid.decode("utf-8", "replace"))

    def subscription_removed(self, sub: Subscription) -> None:
        """A reload took away the right to `sub`: tell the client as the reference does."""
        subj, sid = _quoted(sub.subject), _quoted(sub.sid)
        if sub.queue is None:
            self.send_err(f"Permissions Violation for Subscription to {subj} (sid {sid})")
            log.info("Removed sub %s (sid %s) for %s - not authorized", subj, sid,
                     self.login.user or "N/A")
        else:
            q = _quoted(sub.queue)
            self.send_err(f"Permissions Violation for Subscription to {subj} using queue {q} "
                          f"(sid {sid})")
            log.info("Removed sub %s using queue %s (sid %s) for %s - not authorized",
                     subj, q, sid, self.login.user or "N/A")

    def may_publish(self, subject: bytes, trace: MsgTrace | None = None) -> bool:
        """Whether our rights let us publish to `subject` (a reply we were sent counts);
        if not, the reference's -ERR and log line (and the refusal in `trace`)."""
        rights = self.rights
        if rights is None or not rights.limits_publish or rights.may_publish(subject):
            return True
        if self.replies is not None and self.replies.use(subject):
            return True
        self.publish_refused(subject, trace)
        return False

    def publish_refused(self, subject: bytes, trace: MsgTrace | None = None) -> None:
        """Tell the client (and its message's trace, sent now) that it may not publish to
        `subject`, and log it, in the reference's words."""
        subj = _quoted(subject)
        error = f"Permissions Violation for Publish to {subj}"
        if trace is not None:
            trace.fail(error)
        self.send_err(error)
        log.error("%s - Publish Violation - Subject %s", self.describe(), subj)

    def reserved_reply(self, reply: bytes, trace: MsgTrace | None = None) -> bool:
        """Whether `reply` is one a client may not give (a JetStream ack's, a service
        import's or a gateway's reply: it could answer for another); if so, the reference's
        -ERR and log line."""
        if not any(reply.startswith(prefix) and len(reply) >= least
                   for prefix, least in _RESERVED_REPLIES):
            return False
        error = f"Permissions Violation for Publish with Reply of {_quoted(reply)}"
        if trace is not None:
            trace.fail(error)
        self.send_err(error)
        log.error("%s - Publish Violation - Reply %s", self.describe(), _quoted(reply))
        return True

    def _checked_pub(self, subject: bytes, reply: bytes | None, payload: bytes) -> None:
        if self.may_publish(subject):
            self.on_pub(subject, reply, payload)

    def _mapped_pub(self, subject: bytes, reply: bytes | None, payload: bytes) -> None:
        """A PUB in an account with subject mappings: on the subject its mapping picks,
        which our publish permissions are checked against, as the reference checks them."""
        subject = self.mapped(subject)
        rights = self.rights
        if rights is None or not rights.limits_publish or self.may_publish(subject):
            self.on_pub(subject, reply, payload)

    def mapped(self, subject: bytes, trace: MsgTrace | None = None) -> bytes:
        """The subject a message we publish to `subject` goes to (our account's subject
        mappings; b"" for a share a mapping drops). A mapping that applies (also one that
        leaves the subject as it was) is an event of the message's `trace`."""
        mappings = self.account.mappings
        if mappings is None:
            return subject
        found = mappings.select(subject)
        if found is None:
            return subject
        self.mapping_applied(subject, found, trace)
        return found

    def mapping_applied(self, subject: bytes, to: bytes, trace: MsgTrace | None) -> None:
        """A subject mapping took our message from `subject` to `to`."""
        if trace is not None:
            trace.mapped(to)

    def on_unsub(self, sid: bytes, max_msgs: int) -> None:
        self.unsubscribe(sid, max_msgs)
        if self.verbose:
            self.queue(OK)

    def on_pub(self, subject: bytes, reply: bytes | None, payload: bytes) -> None:
        if reply and reply.startswith(_RESERVED_PREFIXES) and self.reserved_reply(reply):
            return
        if self.verbose:
            self.queue(OK)
        self.in_msgs += 1
        self.in_bytes += len(payload)
        self.server.route(self, subject, reply, msg_frame(b"MSG ", subject, reply, payload), None)

    def on_hpub(self, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes) -> None:
        if not hdr_len:
            # As the reference: a header block of size 0 is no header block, so MSG.
            if self.account.mappings is not None:
                subject = self.mapped(subject)
            if self.rights is None or self.may_publish(subject):
                self.on_pub(subject, reply, data)
            return
        trace = None
        if data.find(b"Nats-Trace-Dest", 0, hdr_len) >= 0:
            # As the reference, the trace (and the right to publish to its destination) is
            # settled before the subject's permission. Only messages that ask for tracing
            # pay for it.
            from .msgtrace import start_trace

            traced = start_trace(self, subject, hdr_len, data)
            if traced is None:
                return  # dropped, as the reference drops it
            hdr_len, data, trace = traced
        if self.account.mappings is not None:
            subject = self.mapped(subject, trace)  # (after the trace began: it names the published)
        if self.rights is not None and not self.may_publish(subject, trace):
            return
        if reply and reply.startswith(_RESERVED_PREFIXES) and self.reserved_reply(reply, trace):
            return
        if self.verbose:
            self.queue(OK)
        self.in_msgs += 1
        self.in_bytes += len(data)
        self.server.route(
            self,
            subject,
            reply,
            msg_frame(b"HMSG ", subject, reply, data, hdr_len),
            Headerless(subject, reply, data, hdr_len),
            trace,
        )
        if trace is not None:
            trace.send()

    def on_hpub_too_big(self, subject: bytes, hdr: bytes, size: int) -> None:
        if hdr.find(b"Nats-Trace-Dest") >= 0:
            from .msgtrace import trace_refused

            trace_refused(self, subject, hdr, size, "maximum payload exceeded")

    def no_responders_reply(self, subject: bytes, reply: bytes) -> None:
        """Tell a requester that nobody listens on `subject`, with a 503 status message."""
        plain = self.account.sublist.match(reply)[0]
        for sub in plain:
            if sub.client is self:
                hdr = b"NATS/1.0 503\r\nNats-Subject: %b\r\n\r\n" % subject
                self.queue(b"HMSG %b %b %d %d\r\n%b\r\n" % (reply, sub.sid, len(hdr), len(hdr), hdr))
                return
