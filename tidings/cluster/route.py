"""One route: a connection to another server of the cluster, one more kind of connection of
the core (reading, output, flow control and pings are the server's `Connection`'s).

It speaks one of two dialects, chosen from the peer's INFO (or from its first interest
operation, for a peer that sends none):
- "seed", the route protocol of the seeds (and of tidings among itself): each remote
  subscription is announced as `SUB <subject> [queue] RSID|QRSID:<cid>:<sid>`, a message is
  `MSG <subject> <that sid> [reply] <size>` (HMSG with headers), once per route for plain
  interest and once per queue group the sender picked on the other side;
- "nats", the reference's current protocol: interest per account and subject (`RS+ <account>
  <subject>`, queue groups with their weight), a message once per route as `RMSG <account>
  <subject> [+ reply | |] [queues...] <size>`, naming the queue groups the receiver is to
  serve. Two tidings servers speak it too when either has accounts (the seed's has none).

Remote interest lives in the server's subject index as subscriptions whose client is the
route, so the result cache (and the parser's skip of unrouted publishes) counts it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import TYPE_CHECKING, Any

from ..protocol.errors import AUTHORIZATION_VIOLATION, STALE_CONNECTION, ProtocolError
from ..protocol.parser import ClientOpParser, decode_json
from ..protocol.subjects import is_valid_subscription
from ..redact import redact_url
from ..server.accounts import Account
from ..server.connection import Connection, Frame, Headerless, msg_frame
from ..server.sublist import EMPTY_RESULT, Subscription

if TYPE_CHECKING:
    from ..server.server import Server
    from .cluster import Cluster

log = logging.getLogger("tidings.cluster")

SEED = "seed"
NATS = "nats"
GLOBAL_ACCOUNT = b"$G"
# The reference pings a route one second after it is made, then at most every 30 s.
FIRST_PING = 1.0
MAX_PING_INTERVAL = 30.0
CLIENT_ON_ROUTE_PORT = "attempted to connect to route port"
ROUTE_MAX_PAYLOAD = 999_999_999


class RouteConnection(Connection):
    """Our side of one route, accepted or solicited (`url` set)."""

    is_route = True

    __slots__ = (
        "cluster", "url", "dialect", "remote_id", "remote_name", "info", "registered",
        "done", "duplicate", "to_self", "implicit", "slow", "held_info",
    )

    def __init__(self, cluster: Cluster, url: str = "", implicit: bool = False) -> None:
        server = cluster.server
        super().__init__(server)
        self.cluster = cluster
        self.url = url  # where we connected to; "" for an accepted route
        self.implicit = implicit  # solicited because gossip told us of the server
        opts = server.options
        # Servers of a cluster may have different max_payload settings: as in the reference,
        # a route's messages are not held to ours (only to the 9 digits of a size field).
        # The compiled scanner skips messages of the global account nobody listens to
        # (other accounts' it passes on to be routed by their own index).
        self.parser = ClientOpParser(
            self, ROUTE_MAX_PAYLOAD, opts.max_control_line,
            interest=(server.sublist.cache, EMPTY_RESULT), route=True,
        )
        self.parser.headers = True  # a peer's HPUB (the seed's PUB with headers) is fine
        self.dialect: str | None = None
        self.remote_id = ""
        self.remote_name = ""
        self.info: dict[str, Any] = {}  # the peer's first INFO
        self.held_info: dict[str, Any] | None = None  # an INFO that came before CONNECT
        self.registered = False
        self.duplicate = False  # closed because another route to the same server won
        self.to_self = False
        self.slow = False  # past max_pending (and not drained since)
        self.done: asyncio.Future[None] = server.loop.create_future()

    # -- connection ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.accepted(transport)
        cluster = self.cluster
        cluster.pending.add(self)
        if self.url:
            self.queue(cluster.connect_line(self.url))
        else:
            # An accepted route starts with CONNECT, as the reference's; without route
            # authorization its INFO may come first, as the seed's connecting server sends it
            # (taken in once CONNECT has come: on_info).
            self.parser.awaiting_connect = True
            if cluster.auth_required:
                self.auth_timer = self.server.loop.call_later(
                    cluster.auth_timeout, self._auth_expired
                )
            else:
                self.parser.before_connect = b"CcIi"
        self.queue(cluster.info_line())
        self.server.flush()
        # No PING before the INFO exchange (as the reference), but a route that never gets
        # that far is closed as stale after as long as unanswered PINGs would take.
        opts = self.server.options
        self.ping_timer = self.server.loop.call_later(
            self.ping_interval() * (opts.ping_max + 1), self._never_registered
        )

    def _never_registered(self) -> None:
        if not self.registered and not self.closed:
            self.close_with_error(STALE_CONNECTION, "route never registered")

    def start_pings(self) -> None:
        """Registered: keep-alive from now on, the first PING after about a second."""
        if self.ping_timer is not None:
            self.ping_timer.cancel()
        self.ping_timer = self.server.loop.call_later(
            FIRST_PING * (1 + random.random() / 5), self._ping_tick
        )

    def past_max_pending(self) -> bool:
        """As the reference: a route is not closed for its pending bytes (only when it
        takes nothing for the write deadline, Server._sweep_writes); its producers stall
        (flow.py). The episode is counted and logged once, until it drains."""
        if not self.slow:
            self.slow = True
            self.server.slow_consumers += 1
            log.warning("%s slow consumer: MaxPending of %d exceeded", self.describe(),
                        self.server.options.max_pending)
        return False

    def resume_writing(self) -> None:
        self.slow = False
        super().resume_writing()

    def ping_interval(self) -> float:
        return min(self.server.options.ping_interval, MAX_PING_INTERVAL)

    def gone(self) -> None:
        self.server.retire(self)
        self.cluster.route_gone(self)
        if not self.done.done():
            self.done.set_result(None)

    def describe(self) -> str:
        return f"route cid={self.cid} {self.remote_name or self.remote_id or redact_url(self.url)}"

    # -- handshake -------------------------------------------------------------
    def on_connect(self, arg: bytes) -> None:
        connect = decode_json(arg, "route CONNECT")
        if not isinstance(connect, dict):
            raise ProtocolError(None, "route CONNECT is not a JSON object")
        if connect.get("lang"):
            # Clients say what language they are in; servers don't.
            raise ProtocolError(CLIENT_ON_ROUTE_PORT, "a client on the route port")
        cluster = self.cluster
        if self.auth_timer is not None:
            self.auth_timer.cancel()
            self.auth_timer = None
        if cluster.auth_required and not cluster.authenticate(connect):
            raise ProtocolError(AUTHORIZATION_VIOLATION, "route authorization violation")
        refusal = cluster.check_cluster_name(
            connect.get("cluster"), bool(connect.get("dynamic"))
        )
        if refusal:
            raise ProtocolError(refusal, "cluster name mismatch")
        self.parser.awaiting_connect = False
        self.connected = True
        name = connect.get("name")
        if isinstance(name, str) and not self.remote_id:
            self.remote_id = name
        self.headers = bool(connect.get("headers"))
        if self.held_info is not None:
            info, self.held_info = self.held_info, None
            self.on_info(info)

    def on_info(self, info: dict[str, Any]) -> None:
        server_id = info.get("server_id")
        if not isinstance(server_id, str) or not server_id:
            raise ProtocolError(None, "route INFO without server_id")
        if self.registered:
            if server_id != self.remote_id:
                self.cluster.discovered(info)  # gossip about another server
            else:
                self.cluster.remote_changed(self, info)
            return
        if not self.connected and not self.url:
            # The seed's order: an accepted route's INFO before its CONNECT. Nothing in it
            # is acted on (registration, its gossip) until CONNECT has been taken.
            if self.held_info is None:
                self.held_info = info
            return
        if self.info:
            return  # a second INFO before registration: nothing new to learn
        self.info = info
        self.remote_id = server_id
        self.remote_name = str(info.get("server_name") or info.get("name") or "")
        if "headers" in info:
            self.headers = bool(info.get("headers"))
        if self.dialect is None:
            seed = _speaks_seed(info) and not (
                info.get("tidings_accounts") or needs_accounts_dialect(self.server))
            self.choose_dialect(SEED if seed else NATS)
        if not self.url:
            refusal = None
        else:
            refusal = self.cluster.check_cluster_name(
                info.get("cluster"), bool(info.get("cluster_dynamic"))
            )
        if refusal:
            raise ProtocolError(refusal, "cluster name mismatch")
        self.cluster.register(self)

    def choose_dialect(self, dialect: str) -> None:
        self.dialect = dialect
        parser = self.parser
        parser.seed_hmsg = dialect == SEED
        # Runs of messages go through the compiled scanner (see parser.py).
        parser.scan_mode = 1 if dialect == SEED else 2
        parser.bulk = True

    def on_ping(self) -> None:
        self.queue(b"PONG\r\n")

    def on_err(self, message: str) -> None:
        log.info("%s sent -ERR '%s': closing", self.describe(), message)
        self.close_with_error(None)

    # -- interest from the peer ------------------------------------------------
    def on_sub(self, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        """The seed's SUB <subject> [queue] RSID:<cid>:<sid>."""
        if self.dialect is None:
            self.choose_dialect(SEED)
        if sid in self.subs:
            return
        if not is_valid_subscription(subject):
            log.debug("%s: invalid subject %r in SUB", self.describe(), subject)
            return
        self._add_interest(sid, subject, queue)

    def on_unsub(self, sid: bytes, max_msgs: int) -> None:
        self.unsubscribe(sid, max_msgs)

    def on_remote_sub(self, fields: list[bytes], leaf: bool) -> None:
        """RS+ <account> <subject> [<queue> <weight>] (LS+ the same for a leaf's interest)."""
        if self.dialect is None:
            self.choose_dialect(NATS)
        if leaf and len(fields) in (3, 5) and fields[1] == GLOBAL_ACCOUNT:
            fields = fields[1:]  # LS+ <origin cluster> ...: no leaf nodes here to care
        if len(fields) not in (2, 4):
            raise ProtocolError(None, f"RS+ parse error: {fields!r}")
        name, subject = fields[0], fields[1]
        account = self.server.accounts.get(name.decode("utf-8", "replace"))
        if account is None:
            return  # an account we do not have: no subscriber of ours can be in it
        queue = fields[2] if len(fields) > 2 else None
        weight = 1
        if queue is not None:
            weight = int(fields[3]) if fields[3].isdigit() else 0
            if weight <= 0:
                raise ProtocolError(None, f"RS+ bad queue weight: {fields!r}")
        key = _interest_key(name, subject, queue)
        sub = self.subs.get(key)
        if sub is not None:
            if sub.weight != weight:  # a queue group's members there changed in number
                account.sublist.reweigh(sub, weight)
            return
        if not is_valid_subscription(subject):
            log.debug("%s: invalid subject %r in RS+", self.describe(), subject)
            return
        self._add_interest(key, subject, queue, weight, account)

    def on_remote_unsub(self, fields: list[bytes], leaf: bool) -> None:
        if leaf and len(fields) in (3, 4) and fields[1] == GLOBAL_ACCOUNT:
            fields = fields[1:]
        if len(fields) not in (2, 3):
            raise ProtocolError(None, f"RS- parse error: {fields!r}")
        key = _interest_key(fields[0], fields[1], fields[2] if len(fields) > 2 else None)
        sub = self.subs.get(key)
        if sub is not None:
            self.remove_sub(sub)

    def _add_interest(
        self, key: bytes, subject: bytes, queue: bytes | None, weight: int = 1,
        account: Account | None = None,
    ) -> None:
        sub = Subscription(self, subject, queue, key)
        sub.weight = weight
        self.subs[key] = sub
        (account or self.account).sublist.insert(sub)

    def account_of(self, key: bytes) -> Account:
        """The account of the remote interest `key` (the seed's sids: the global one)."""
        if self.dialect == SEED:
            return self.account
        name = key.split(b" ", 1)[0].decode("utf-8", "replace")
        return self.server.accounts.get(name) or self.account

    def remove_sub(self, sub: Subscription) -> None:
        sub.closed = True
        if self.subs.get(sub.sid) is sub:
            del self.subs[sub.sid]
        self.account_of(sub.sid).sublist.remove(sub)

    # -- messages from the peer -----------------------------------------------
    def on_pub(self, subject: bytes, reply: bytes | None, payload: bytes) -> None:
        """The seed's PUB from another server: for our subscribers."""
        self.in_msgs += 1
        self.in_bytes += len(payload)
        self.server.route_from(self, subject, reply, msg_frame(b"MSG ", subject, reply, payload),
                               None, (), None)

    def on_hpub(self, subject: bytes, reply: bytes | None, hdr_len: int, data: bytes) -> None:
        self.on_routed(None, subject, None, reply, None, hdr_len, data)

    def on_hpub_too_big(self, subject: bytes, hdr: bytes, size: int) -> None:
        pass

    def on_routed(
        self, account: bytes | None, subject: bytes, sid: bytes | None, reply: bytes | None,
        queues: list[bytes] | None, hdr_len: int, data: bytes,
    ) -> None:
        self.in_msgs += 1
        self.in_bytes += len(data)
        acc = None
        if account is not None and account != GLOBAL_ACCOUNT:
            acc = self.server.accounts.get(account.decode("utf-8", "replace"))
            if acc is None:
                return
        if hdr_len >= 0:
            frame = msg_frame(b"HMSG ", subject, reply, data, hdr_len)
            plain: Headerless | None = Headerless(subject, reply, data, hdr_len)
        else:
            frame = msg_frame(b"MSG ", subject, reply, data)
            plain = None
        server = self.server
        if sid is None:
            server.route_from(self, subject, reply, frame, plain, queues or (), None, acc)
        elif sid.startswith(b"QRSID:"):
            direct = self.cluster.local_sub(sid)
            if direct is not None:
                server.route_from(self, subject, reply, frame, plain, (), direct)
        else:
            server.route_from(self, subject, reply, frame, plain, (), None)

    # -- messages to the peer --------------------------------------------------
    def send_msg(
        self,
        plain_sub: Subscription | None,
        queue_subs: list[Subscription] | None,
        subject: bytes,
        frame: Frame,
        plain_frame: Headerless | None,
        reply: bytes | None,
        account: Account,
    ) -> None:
        """Forward one message of `account`: for the peer's plain interest (`plain_sub`, any
        of the route's matching plain subscriptions) and the queue groups we picked it for."""
        if self.dialect == SEED:
            deliver = self.server.deliver
            if plain_sub is not None:
                deliver(None, plain_sub, frame, plain_frame)
            if queue_subs:
                for sub in queue_subs:
                    deliver(None, sub, frame, plain_frame)
            return
        if plain_frame is not None and not self.headers:
            frame, plain_frame = plain_frame.frame(), None
        _, tail, big, size = frame
        op = account.rmsg if plain_frame is None else account.hmsg
        if queue_subs:
            names = b" ".join([sub.queue for sub in queue_subs])  # type: ignore[misc]
            if reply:
                tail = b"+ " + reply + b" " + names + tail[len(reply):]
            else:
                tail = b"| " + names + b" " + tail
        out = self.out
        if not out:
            self.server.dirty.append(self)
        out.append(op + subject + b" " + tail)
        if big is not None:
            out.append(big)
            out.append(b"\r\n")
            self.out_vectored = True
        self.out_msgs += 1
        self.out_payload += size


def _interest_key(account: bytes, subject: bytes, queue: bytes | None) -> bytes:
    key = account + b" " + subject
    return key if queue is None else key + b" " + queue


def _speaks_seed(info: dict[str, Any]) -> bool:
    """A tidings server (which says so in its INFO) or a server older than the reference's
    2.0 speaks the seed's route protocol; anything else the reference's."""
    if info.get("tidings"):
        return True
    version = info.get("version")
    if not isinstance(version, str) or not version:
        return True
    major = version.split(".", 1)[0]
    return major.isdigit() and int(major) < 2


def encode_json(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def needs_accounts_dialect(server: Server) -> bool:
    """Whether routes must speak the reference's dialect (accounts in it): with accounts,
    and with JetStream, whose own subscriptions take messages from the routes (the seed's
    dialect carries clients' subscriptions only)."""
    jetstream = server.options.jetstream
    return server.accounts.configured or (jetstream is not None and jetstream.enabled)
