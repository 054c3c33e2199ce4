"""Users, passwords (plain and bcrypt), NKeys and permissions: the same configuration file
started with tidings and with the reference nats-server, the same bytes sent to both, the
same answers expected; and what the reference leaves to us (a bcrypt check never holds up
other clients, a wildcard subscriber never gets what it may not see)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt
import nats
import nkeys
import pytest

from tests.harness import Server, nats_server_binary, start_configured, wait_until
from tests.harness.rawnats import RawConn, Timeout, run_exchange
from tests.messaging import synced

pytestmark = pytest.mark.timeout(90)

KINDS = ("tidings", "reference")
SEED = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
NKEY = nkeys.from_seed(SEED).public_key.decode()
OTHER_SEED = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(6)).decode()

USERS = f"""
authorization {{
  timeout: 1
  users = [
    {{user: alice, password: pw, permissions: {{
        publish: {{allow: ["a.>", "_INBOX.>"], deny: ["a.secret"]}}
        subscribe: {{allow: ["a.*", "q.* grp", "_INBOX.>"], deny: ["a.hidden"]}}
    }}}}
    {{user: bob, password: pw, permissions: {{publish: "b.>", subscribe: ">",
                                            allow_responses: true}}}}
    {{user: erin, password: pw, permissions: {{subscribe: ">",
                                             allow_responses: {{max: 2, expires: "1m"}}}}}}
    {{user: carol, password: pw, permissions: {{subscribe: {{allow: ">", deny: "a.secret"}}}}}}
    {{user: dave, password: "{HASH}"}}
    {{user: root, password: pw}}
    {{user: tracer, password: pw, permissions: {{publish: ["foo", "ok.trace"], subscribe: ">",
                                               allow_responses: true}}}}
    {{nkey: {NKEY}, permissions: {{publish: "n.>"}}}}
  ]
}}
"""


@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, Server]]:
    servers = {kind: start_configured(kind, USERS) for kind in KINDS}
    yield servers
    for server in servers.values():
        server.stop()


def connect_line(user: str, password: str = "pw", verbose: bool = False,
                 extra: str = "") -> bytes:
    v = "true" if verbose else "false"
    return (f'CONNECT {{"user":"{user}","pass":"{password}","verbose":{v},'
            f'"pedantic":false{extra}}}\r\n').encode()


# Each case: what one client sends in one go; the answers of both servers must be the same.
MATRIX = {
    "publish allowed and denied": connect_line("alice", verbose=True)
    + b"PUB a.b 1\r\nx\r\nPUB a.secret 1\r\nx\r\nPUB c 0\r\n\r\nHPUB a.secret 12 12\r\n"
      b"NATS/1.0\r\n\r\n\r\nPUB _INBOX.x 0\r\n\r\n",
    "subscribe allowed and denied": connect_line("alice", verbose=True)
    + b"SUB a.* 1\r\nSUB > 2\r\nSUB a.hidden 3\r\nSUB q.x grp 4\r\nSUB q.x other 5\r\n"
      b"SUB q.x 6\r\nSUB a.b.c 7\r\nSUB b 8\r\n",
    "a plain list is an allow list": connect_line("bob")
    + b"PUB b.x 0\r\n\r\nPUB a 0\r\n\r\nSUB anything.at.all 1\r\n",
    "deny over allow": connect_line("carol") + b"SUB a.secret 1\r\nSUB a.other 2\r\n",
    "a user without permissions": connect_line("root") + b"SUB > 1\r\nPUB x 0\r\n\r\n",
    "unknown user": connect_line("mallory"),
    "wrong password": connect_line("alice", "nope"),
    "no credentials": b'CONNECT {"verbose":false}\r\n',
    "bcrypt password, input after CONNECT held until checked": connect_line("dave", "s3cret")
    + b"SUB x 1\r\nPUB x 2\r\nhi\r\n",
    "bcrypt password wrong": connect_line("dave", "nope") + b"SUB x 1\r\n",
    "nkey without a signature": f'CONNECT {{"nkey":"{NKEY}"}}\r\n'.encode(),
    "operation before CONNECT": b"SUB x 1\r\n",
}


@pytest.mark.parametrize("case", list(MATRIX))
def test_permission_matrix_as_the_reference(users: dict[str, Server], case: str) -> None:
    outcomes = {kind: run_exchange(server.port, [MATRIX[case]])
                for kind, server in users.items()}
    assert outcomes["tidings"] == outcomes["reference"]


def test_refusals_are_logged_with_the_user_never_the_secret(
        users: dict[str, Server]) -> None:
    server = users["tidings"]
    with RawConn(server.port) as conn:
        conn.send(connect_line("dave", "wrong-secret-xyz"))
        assert conn.read_to_eof() == b"-ERR 'Authorization Violation'\r\n"
    with RawConn(server.port) as conn:
        conn.connect(connect_line("alice"))
        conn.send(b"PUB a.secret 0\r\n\r\n")
        assert conn.barrier() == b"-ERR 'Permissions Violation for Publish to \"a.secret\"'\r\n"
    log = server.log()
    assert 'authentication error - User "dave"' in log
    assert 'Publish Violation - Subject "a.secret"' in log
    assert "wrong-secret-xyz" not in log


def test_a_wildcard_subscriber_never_gets_a_denied_subject(
        users: dict[str, Server]) -> None:
    for kind, server in users.items():
        with RawConn(server.port) as sub, RawConn(server.port) as pub:
            sub.connect(connect_line("carol"))
            sub.send(b"SUB a.* 1\r\nSUB > 2\r\n")
            assert sub.barrier() == b""
            pub.connect(connect_line("root"))
            pub.send(b"PUB a.b 1\r\n1\r\nPUB a.secret 1\r\n2\r\nPUB a.c 1\r\n3\r\n")
            pub.barrier()
            got = sub.barrier()
            assert b"a.secret" not in got, kind
            assert got.count(b"MSG a.b ") == 2 and got.count(b"MSG a.c ") == 2, (kind, got)


def test_subscription_covering_more_than_allowed_gets_only_allowed(
        users: dict[str, Server]) -> None:
    """alice may subscribe to a.* only. The reference matches a SUB's wildcard tokens as if
    they were literal, so it takes `SUB a.>` (its `*` matches the token `>`); whatever it
    takes, tidings delivers only the subjects alice may see."""
    server = users["tidings"]
    with RawConn(server.port) as sub, RawConn(server.port) as pub:
        sub.connect(connect_line("alice"))
        sub.send(b"SUB a.> 1\r\n")
        accepted = sub.barrier() == b""
        pub.connect(connect_line("root"))
        pub.send(b"PUB a.b 1\r\n1\r\nPUB a.b.c 1\r\n2\r\nPUB a.hidden 1\r\n3\r\n")
        pub.barrier()
        got = sub.barrier()
        assert got == (b"MSG a.b 1 1\r\n1\r\n" if accepted else b"")


@pytest.mark.parametrize(("user", "allowed"), [("bob", 1), ("erin", 2)])
def test_allow_responses_lets_replies_out(users: dict[str, Server], user: str,
                                          allowed: int) -> None:
    answers = {}
    for kind, server in users.items():
        with RawConn(server.port) as svc, RawConn(server.port) as req:
            svc.connect(connect_line(user))
            svc.send(b"SUB svc 1\r\n")
            svc.barrier()
            req.connect(connect_line("root"))
            req.send(b"SUB reply.1 9\r\nPUB svc reply.1 2\r\nhi\r\n")
            req.barrier()
            assert svc.read_line() == b"MSG svc 1 reply.1 2\r\n", kind
            assert svc.read_line() == b"hi\r\n"
            svc.send(b"PUB reply.1 2\r\nok\r\nPUB reply.1 2\r\nok\r\nPUB reply.1 2\r\nok\r\n"
                     b"PUB reply.2 0\r\n\r\n")
            answers[kind] = (svc.barrier(), req.barrier())
    assert answers["tidings"] == answers["reference"]
    assert answers["tidings"][1] == b"MSG reply.1 9 2\r\nok\r\n" * allowed


def _nonce_signature(port: int) -> tuple[RawConn, str]:
    conn = RawConn(port)
    nonce = conn.info["nonce"]
    sig = nkeys.from_seed(SEED).sign(nonce.encode())
    return conn, base64.urlsafe_b64encode(sig).rstrip(b"=").decode()


def test_nkey_signature_over_this_connection_nonce_only(users: dict[str, Server]) -> None:
    for kind, server in users.items():
        first, sig = _nonce_signature(server.port)
        with first:
            assert len(first.info["nonce"]) >= 11, kind
            second, _ = _nonce_signature(server.port)
            with second:
                assert second.info["nonce"] != first.info["nonce"]
                # A signature made for another connection's nonce is refused...
                second.send(f'CONNECT {{"nkey":"{NKEY}","sig":"{sig}"}}\r\n'.encode())
                assert second.read_to_eof() == b"-ERR 'Authorization Violation'\r\n", kind
            # ... and accepted on its own connection.
            first.connect(f'CONNECT {{"nkey":"{NKEY}","sig":"{sig}","verbose":false}}\r\n'
                          .encode())
            first.send(b"PUB x 0\r\n\r\n")
            assert first.barrier() == b"-ERR 'Permissions Violation for Publish to \"x\"'\r\n"


@pytest.mark.parametrize("client", ["nats-py", "tidings.client"])
async def test_clients_with_nkeys_bcrypt_and_permissions(users: dict[str, Server],
                                                         client: str) -> None:
    import tidings.client

    connect = nats.connect if client == "nats-py" else tidings.client.connect
    for kind, server in users.items():
        errors: list[Exception] = []
        refused = asyncio.Event()

        async def on_error(exc: Exception, errors: list[Exception] = errors,
                           refused: asyncio.Event = refused) -> None:
            errors.append(exc)
            refused.set()

        nc = await connect(server.url, nkeys_seed_str=SEED.decode(), error_cb=on_error,
                           allow_reconnect=False)
        dave = await connect(server.url, user="dave", password="s3cret", allow_reconnect=False)
        sub = await dave.subscribe("n.>")
        await synced(dave)
        await nc.publish("elsewhere", b"2")
        await nc.publish("n.one", b"1")
        msg = await sub.next_msg(timeout=5)
        assert (msg.subject, msg.data) == ("n.one", b"1"), kind
        await asyncio.wait_for(refused.wait(), 5)
        assert "permissions violation for publish" in str(errors[0]).lower(), kind
        for wrong in ({"nkeys_seed_str": OTHER_SEED.decode()},
                      {"user": "dave", "password": "wrong"}):
            with pytest.raises(Exception, match="(?i)authorization (violation|failed)"):
                await connect(server.url, allow_reconnect=False, max_reconnect_attempts=0,
                              **wrong)
        await nc.close()
        await dave.close()


async def test_failed_bcrypt_logins_do_not_hold_up_other_clients(
        users: dict[str, Server]) -> None:
    """While 60 wrong bcrypt passwords are checked, another client's PINGs are answered."""
    server = users["tidings"]
    loop = asyncio.get_running_loop()
    watcher = RawConn(server.port)
    watcher.connect(connect_line("root"))

    def attempt() -> bytes:
        with RawConn(server.port) as conn:
            conn.send(connect_line("dave", "wrong"))
            return conn.read_to_eof(timeout=20)

    attempts = [loop.run_in_executor(None, attempt) for _ in range(60)]
    pongs = 0
    while not all(a.done() for a in attempts):
        assert await loop.run_in_executor(None, watcher.barrier) == b""
        pongs += 1
    assert {await a for a in attempts} == {b"-ERR 'Authorization Violation'\r\n"}
    assert pongs >= 1
    watcher.close()


@pytest.mark.parametrize("kind", KINDS)
def test_authentication_timeout(users: dict[str, Server], kind: str) -> None:
    with RawConn(users[kind].port) as conn:
        assert conn.read_to_eof(timeout=5) == b"-ERR 'Authentication Timeout'\r\n"


BAD_CONNECTS = {
    "not JSON": b"CONNECT {user:alice}\r\n",
    "JSON but not an object": b'CONNECT ["alice"]\r\n',
    "a number for a user": b'CONNECT {"user":1,"pass":"pw"}\r\n',
    "oversized": b'CONNECT {"user":"alice","pass":"' + b"x" * 5000 + b'"}\r\n',
    "a signature that is not base64": f'CONNECT {{"nkey":"{NKEY}","sig":"!!!"}}\r\n'.encode(),
    "a key that is not an nkey": b'CONNECT {"nkey":"UNOTAKEY","sig":"AAAA"}\r\n',
    "CONNECT split byte by byte": connect_line("alice"),
}


@pytest.mark.parametrize("case", list(BAD_CONNECTS))
def test_bad_connects_refused_as_the_reference(users: dict[str, Server],
                                                case: str) -> None:
    data = BAD_CONNECTS[case]
    pieces = [data[i:i + 1] for i in range(len(data))] if "split" in case else [data]
    outcomes = {kind: run_exchange(server.port, pieces, pause=0.0005)
                for kind, server in users.items()}
    assert outcomes["tidings"] == outcomes["reference"]
    # and the server still serves everyone else
    with RawConn(users["tidings"].port) as other:
        other.connect(connect_line("root"))


CONFIG_ERRORS = {
    "users and a single user": 'authorization { user: a, password: b, users = [{user: c}] }',
    "users and a token": 'authorization { token: t, users = [{user: c}] }',
    "user and token": 'authorization { user: a, password: b, token: t }',
    "entry without a user": 'authorization { users = [{password: x}] }',
    "bad nkey": 'authorization { users = [{nkey: UABC}] }',
    "nkey with a password": f'authorization {{ users = [{{nkey: {NKEY}, password: x}}] }}',
    "duplicate user": 'authorization { users = [{user: a}, {user: a}] }',
    "unknown permission": 'authorization { users = [{user: a, permissions: {pubb: x}}] }',
    "allow or deny only": 'authorization { users = [{user: a, permissions: {pub: {allw: x}}}] }',
    "invalid subject": 'authorization { users = [{user: a, permissions: {pub: "a..b"}}] }',
    "invalid queue": 'authorization { users = [{user: a, permissions: {sub: "a b.."}}] }',
    "route users": 'cluster { port: -1, authorization { users = [{user: a}] } }',
    "route token": 'cluster { port: -1, authorization { token: t } }',
}


@pytest.mark.parametrize("case", list(CONFIG_ERRORS))
def test_configuration_mistakes_worded_as_the_reference(tmp_path: Path, case: str) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text(CONFIG_ERRORS[case] + "\n")
    ours = subprocess.run([sys.executable, "-m", "tidings", "server", "-t", "-c", str(conf)],
                          capture_output=True, text=True, timeout=30)
    ref = subprocess.run([nats_server_binary(), "-t", "-c", str(conf)],
                         capture_output=True, text=True, timeout=30)
    assert ours.returncode != 0 and ref.returncode != 0
    # The reference's message, after its file:line:col (columns are counted differently).
    reason = ref.stderr.strip().splitlines()[-1].split(": ", 2)[-1].strip()
    reason = reason.removesuffix(")").split(" (")[0] if "Duplicate" in reason else reason
    assert reason.split(":")[-1].strip() in ours.stderr, (ref.stderr, ours.stderr)


def test_an_unknown_no_auth_user_stops_the_server(tmp_path: Path) -> None:
    conf = tmp_path / "n.conf"
    conf.write_text("no_auth_user: zed\nauthorization { users = [{user: a, password: b}] }\n")
    for cmd in ([nats_server_binary()], [sys.executable, "-m", "tidings", "server"]):
        run = subprocess.run([*cmd, "-p", "-1", "-c", str(conf)], capture_output=True,
                             text=True, timeout=30)
        assert run.returncode != 0
        assert ('no_auth_user: "zed" not present as user or nkey in authorization block or '
                "account configuration") in run.stderr, run.stderr


def test_reload_changes_rights_and_closes_removed_users(tmp_path: Path) -> None:
    before = ('authorization { users = [\n'
              '  {user: alice, password: pw, permissions: {subscribe: ["a.*", "b.*"]}}\n'
              '  {user: bob, password: pw}\n] }\n')
    after = ('authorization { users = [\n'
             '  {user: alice, password: pw, permissions: {subscribe: ["a.*"], publish: "a.>"}}\n'
             '  {user: zed, password: hunter2-secret}\n'
             '] }\n')
    seen = {}
    for kind in KINDS:
        server = start_configured(kind, before)
        try:
            alice, bob = RawConn(server.port), RawConn(server.port)
            alice.connect(connect_line("alice"))
            alice.send(b"SUB a.x 1\r\nSUB b.x 2\r\n")
            assert alice.barrier() == b""
            bob.connect(connect_line("bob"))
            Path(server.config_path).write_text(after)
            os.kill(server.pid, signal.SIGHUP)
            closed = bob.read_to_eof(timeout=10)
            alice.read_until(lambda b: b"\r\n" in b, timeout=10)
            alice.send(b"PUB b.x 0\r\n\r\nPUB a.x 1\r\n!\r\n")
            seen[kind] = (closed, alice.barrier())
            alice.close()
            bob.close()
            # (the reference may log it after it has closed bob: waited for, not read at once)
            server.wait_for_log("Reloaded: authorization users", timeout=10)
            assert "hunter2" not in server.log(), kind
        finally:
            server.stop()
    assert seen["tidings"] == seen["reference"]
    assert seen["tidings"][0] == b""  # closed without a word, as the reference


def test_no_auth_user_takes_its_permissions() -> None:
    conf = ('no_auth_user: guest\nauthorization { users = [\n'
            '  {user: guest, password: pw, permissions: {publish: "public.>"}}\n] }\n')
    outcomes = {}
    for kind in KINDS:
        server = start_configured(kind, conf)
        try:
            outcomes[kind] = run_exchange(server.port, [
                b'CONNECT {"verbose":false}\r\nPUB public.x 0\r\n\r\nPUB private 0\r\n\r\n'])
        finally:
            server.stop()
    assert outcomes["tidings"] == outcomes["reference"]
    assert b"Permissions Violation for Publish to \"private\"" in outcomes["tidings"].data


def test_embedded_streaming_connects_whatever_users_there_are(tmp_path: Path) -> None:
    """The streaming server inside `tidings server` is not one of the configured users."""
    server = start_configured("tidings", "authorization { users = [{user: a, password: b}] }\n")
    try:

        async def discover() -> bytes:
            nc = await nats.connect(f"nats://a:b@127.0.0.1:{server.port}",
                                    allow_reconnect=False)
            try:
                with pytest.raises(nats.errors.NoRespondersError):
                    await nc.request("_STAN.discover.nope", b"", timeout=5)
                return b"ok"
            finally:
                await nc.close()

        deadline_ok = asyncio.run(discover())
        assert deadline_ok == b"ok"
        assert server.running
    finally:
        server.stop()
    out = server.log()
    assert "Authorization Violation" not in out and "authentication error" not in out


def test_connz_shows_who_logged_in_with_auth_only() -> None:
    import urllib.request

    seen = {}
    for kind in KINDS:
        server = start_configured(kind, USERS, extra_args=["-m", "-1"])
        http = server.ports["http"]
        try:
            with RawConn(server.port) as alice, RawConn(server.port) as keyed:
                alice.connect(connect_line("alice"))
                keyed_sig = nkeys.from_seed(SEED).sign(keyed.info["nonce"].encode())
                sig = base64.urlsafe_b64encode(keyed_sig).rstrip(b"=").decode()
                keyed.connect(f'CONNECT {{"nkey":"{NKEY}","sig":"{sig}","verbose":false}}\r\n'
                              .encode())
                users = []
                for query in ("", "?auth=1"):
                    with urllib.request.urlopen(f"http://127.0.0.1:{http}/connz{query}",
                                                timeout=10) as r:
                        conns = json.load(r)["connections"]
                    users.append(sorted(c.get("authorized_user", "") for c in conns))
                seen[kind] = users
        finally:
            server.stop()
    assert seen["tidings"] == seen["reference"]
    assert seen["tidings"][1] == sorted(["alice", NKEY])


# -- ways past permissions that the reference closes ---------------------------------------
HEADERS = ',"headers":true'


def hpub(subject: str, headers: list[str], reply: str = "") -> bytes:
    hdr = ("NATS/1.0\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode()
    head = f"HPUB {subject} {reply} " if reply else f"HPUB {subject} "
    return b"%b%d %d\r\n%b\r\n" % (head.encode(), len(hdr), len(hdr), hdr)


def read_msg(conn: RawConn) -> tuple[bytes, bytes, bytes]:
    """The next message on `conn` (the server's PINGs answered): subject, headers, payload."""
    line = conn.read_line()
    while line == b"PING\r\n":
        conn.send(b"PONG\r\n")
        line = conn.read_line()
    words = line.split()
    assert words and words[0] in (b"MSG", b"HMSG"), line
    size = int(words[-1])
    hdr_len = int(words[-2]) if words[0] == b"HMSG" else 0
    assert conn.read_until(lambda b: len(b) >= size + 2)
    data = conn.take(size + 2)[:-2]
    return words[1], data[:hdr_len], data[hdr_len:]


def seen_until_sentinel(conn: RawConn, n: int) -> list[Any]:
    """What `conn` received up to the trace event of sentinel `n`: messages as (subject,
    payload), trace events as their ingress subject and error and their egresses."""
    seen: list[Any] = []
    while True:
        subject, _, body = read_msg(conn)
        if subject != b"ok.trace":
            seen.append((subject.decode(), body.decode()))
            continue
        event = json.loads(body)
        if event["request"]["header"].get("Sentinel") == [str(n)]:
            return seen
        ingress, *egress = event["events"]
        seen.append(("event", ingress["subj"], ingress.get("error", ""),
                     sorted((e["sub"], e.get("error", "")) for e in egress)))


# tracer may publish to foo and ok.trace only, with allow_responses.
TRACE_DEST_CASES = {
    "destination not allowed": hpub("foo", ["Nats-Trace-Dest: admin.cmd", "X: y"]),
    "destination not allowed, trace only": hpub(
        "foo", ["Nats-Trace-Dest: admin.cmd", "Nats-Trace-Only: true"]),
    "subject not allowed, destination allowed": hpub("bar", ["Nats-Trace-Dest: ok.trace"]),
    "neither allowed": hpub("bar", ["Nats-Trace-Dest: admin.cmd"]),
    "both allowed": hpub("foo", ["Nats-Trace-Dest: ok.trace"]),
    "a reply it may send is no destination": hpub("foo", ["Nats-Trace-Dest: admin.reply"]),
}


def _play_trace_dests(server: Server) -> dict[str, Any]:
    outcomes: dict[str, Any] = {}
    with RawConn(server.port) as watch, RawConn(server.port) as tracer:
        watch.connect(connect_line("root", extra=HEADERS))
        watch.send(b"SUB foo 1\r\nSUB bar 2\r\nSUB admin.> 3\r\nSUB ok.trace 4\r\n")
        assert watch.barrier() == b""
        tracer.connect(connect_line("tracer", extra=HEADERS))
        tracer.send(b"SUB svc 1\r\n")
        assert tracer.barrier() == b""
        watch.send(b"PUB svc admin.reply 0\r\n\r\n")  # grants tracer admin.reply
        assert watch.barrier() == b""
        assert read_msg(tracer) == (b"svc", b"", b"")
        for n, (name, data) in enumerate(TRACE_DEST_CASES.items()):
            sentinel = hpub("foo", ["Nats-Trace-Dest: ok.trace", "Nats-Trace-Only: true",
                                    f"Sentinel: {n}"])
            tracer.send(data + sentinel)
            outcomes[name] = (tracer.barrier(), seen_until_sentinel(watch, n))
    return outcomes


def test_a_trace_destination_needs_the_right_to_publish_to_it(
        users: dict[str, Server]) -> None:
    """The reference checks Nats-Trace-Dest against the publish permissions (the lists,
    not a reply it was sent) before the subject, and drops the whole message if refused."""
    ours, theirs = (_play_trace_dests(users[kind]) for kind in KINDS)
    for name in TRACE_DEST_CASES:
        assert ours[name] == theirs[name], name
    assert theirs["destination not allowed"] == (
        b"-ERR 'Permissions Violation for Publish to \"admin.cmd\"'\r\n", [])


async def ws_exchange(port: int, data: bytes) -> bytes:
    """Send `data` and a PING in one frame on a new WebSocket connection; what came back
    after INFO, until the PONG or the close."""
    async with aiohttp.ClientSession() as session, \
            session.ws_connect(f"ws://127.0.0.1:{port}") as ws:
        got = b""
        while not got.endswith(b"\r\n"):
            got += await _ws_frame(ws)
        assert got.startswith(b"INFO "), got
        got = got[got.index(b"\r\n") + 2:]
        await ws.send_bytes(data + b"PING\r\n")
        while not got.endswith(b"PONG\r\n"):
            frame = await _ws_frame(ws)
            if not frame:
                break
            got += frame
        return got


async def _ws_frame(ws: aiohttp.ClientWebSocketResponse) -> bytes:
    msg = await asyncio.wait_for(ws.receive(), 5)
    return msg.data if msg.type == aiohttp.WSMsgType.BINARY else b""


TWO_USERS = f"""
authorization {{ users = [
  {{user: wsonly, password: pw, allowed_connection_types: ["WEBSOCKET"]}}
  {{user: tcponly, password: pw, allowed_connection_types: ["STANDARD"]}}
  {{nkey: {NKEY}, allowed_connection_types: ["WEBSOCKET"]}}
] }}
"""
# Each case: no_auth_user for the server, for its websocket block, and the listener on which
# an anonymous client would become a user that may not connect there.
NO_AUTH_CONNECTION_TYPES = {
    "a WebSocket-only user over TCP": ("wsonly", "", "tcp"),
    "a TCP-only user over WebSocket": ("", "tcponly", "ws"),
    "a WebSocket-only NKey over TCP": (NKEY, "", "tcp"),
}


@pytest.mark.parametrize("case", list(NO_AUTH_CONNECTION_TYPES))
def test_no_auth_user_keeps_its_allowed_connection_types(case: str) -> None:
    """An anonymous client becomes the no_auth_user only over a connection type that user
    may use. Anonymous and with credentials, over TCP and over WebSocket."""
    no_auth, ws_no_auth, refused = NO_AUTH_CONNECTION_TYPES[case]
    conf = TWO_USERS + (f"no_auth_user: {no_auth}\n" if no_auth else "")
    anonymous = b'CONNECT {"verbose":false}\r\n'
    seen = {}
    for kind in KINDS:
        ws_extra = f", no_auth_user: {ws_no_auth}" if ws_no_auth else ""
        server = start_configured(kind, conf + (
            f"websocket {{ listen: 127.0.0.1:-1, no_tls: true{ws_extra} }}\n"))
        ws_port = server.ports["websocket"]
        try:
            tcp = run_exchange(server.port, [anonymous])
            seen[kind] = (
                (tcp.data, tcp.closed),
                asyncio.run(ws_exchange(ws_port, anonymous)),
                run_exchange(server.port, [connect_line("tcponly")]).data,
                asyncio.run(ws_exchange(ws_port, connect_line("wsonly"))),
            )
        finally:
            server.stop()
    assert seen["tidings"] == seen["reference"]
    violation = b"-ERR 'Authorization Violation'\r\n"
    tcp, ws, with_user, ws_with_user = seen["reference"]
    if refused == "tcp":
        assert tcp == (violation, True)
    else:
        assert ws == violation
    assert (with_user, ws_with_user) == (b"", b"PONG\r\n")


def _play_grants(server: Server) -> list[bytes]:
    """bob (publish b.>, allow_responses) tries replies he was and was not sent."""
    seen = []
    with RawConn(server.port) as bob, RawConn(server.port) as root:
        bob.connect(connect_line("bob", extra=',"echo":false'))
        root.connect(connect_line("root", extra=HEADERS))
        # With echo off his own request never reaches him: no grant.
        bob.send(b"SUB b.svc 1\r\nPUB b.svc admin.cmd2 0\r\n\r\nPUB admin.cmd2 0\r\n\r\n")
        seen.append(bob.barrier())
        # A trace-only request is delivered to nobody: no grant.
        root.send(hpub("b.svc", ["Nats-Trace-Dest: sink", "Nats-Trace-Only: true"],
                       reply="admin.cmd3"))
        assert root.barrier() == b""
        bob.send(b"PUB admin.cmd3 0\r\n\r\n")
        seen.append(bob.barrier())
        # A request delivered to him: one answer.
        root.send(b"PUB b.svc admin.cmd4 0\r\n\r\n")
        assert root.barrier() == b""
        bob.send(b"PUB admin.cmd4 0\r\n\r\nPUB admin.cmd4 0\r\n\r\n")
        seen.append(bob.barrier())
    return seen


def test_a_reply_is_granted_only_by_a_delivery(users: dict[str, Server]) -> None:
    ours, theirs = (_play_grants(users[kind]) for kind in KINDS)
    assert ours == theirs
    refused = b"-ERR 'Permissions Violation for Publish to \"%b\"'\r\n"
    assert theirs == [refused % b"admin.cmd2", refused % b"admin.cmd3",
                      b"MSG b.svc 1 admin.cmd4 0\r\n\r\n" + refused % b"admin.cmd4"]


def _play_queue_grant(port: int, members_port: int) -> tuple[list[bytes], list[bytes]]:
    """A request (from a client on `port`) to a queue group of two bobs (on `members_port`):
    what each member got, and what each one's answer got, the receiver's first."""
    members = [RawConn(members_port) for _ in range(2)]
    try:
        for member in members:
            member.connect(connect_line("bob"))
            member.send(b"SUB b.q grp 1\r\nSUB b.after 2\r\n")
            assert member.barrier() == b""
        with RawConn(port) as root:
            root.connect(connect_line("root"))
            if members_port != port:
                _wait_for_route(root, members_port)
            root.send(b"PUB b.q admin.q 0\r\n\r\nPUB b.after 0\r\n\r\n")
            assert root.barrier() == b""
        after = b"MSG b.after 2 0\r\n\r\n"
        got = []
        for member in members:  # b.after comes after the request, wherever it went
            assert member.read_until(lambda b: b.endswith(after))
            got.append(member.take()[:-len(after)])
        receiver = [m for m, g in zip(members, got, strict=True) if g]
        answers = []
        for member in receiver + [m for m in members if m not in receiver]:
            member.send(b"PUB admin.q 0\r\n\r\n")
            answers.append(member.barrier())
        return sorted(got), answers
    finally:
        for member in members:
            member.close()


def _wait_for_route(conn: RawConn, port: int) -> None:
    """Until a message published on `conn` reaches a subscription made now on `port`: the
    route carries every subscription made there before."""
    with RawConn(port) as probe:
        probe.connect(connect_line("root"))
        probe.send(b"SUB probe 1\r\n")
        assert probe.barrier() == b""


        def crossed() -> bool:
            conn.send(b"PUB probe 0\r\n\r\n")
            try:
                return bool(probe.read_until(lambda b: b"MSG probe" in b, timeout=0.1))
            except Timeout:
                return False

        wait_until(crossed, 30, "the route carrying the subscription", interval=0)


QUEUE_REPLY = (b"MSG b.q 1 admin.q 0\r\n\r\n", b"")


def test_a_reply_is_granted_to_the_queue_member_it_went_to(
        users: dict[str, Server]) -> None:
    ours, theirs = (_play_queue_grant(users[kind].port, users[kind].port) for kind in KINDS)
    assert ours == theirs
    assert theirs == ([b"", QUEUE_REPLY[0]],
                      [b"", b"-ERR 'Permissions Violation for Publish to \"admin.q\"'\r\n"])


def test_a_reply_over_a_route_is_granted_to_the_queue_member_it_went_to() -> None:
    seen = {}
    for kind in KINDS:
        a = start_configured(kind, USERS, cluster=True, cluster_name="perm")
        try:
            b = start_configured(kind, USERS, cluster=True, cluster_name="perm", routes=[a])
            try:
                seen[kind] = _play_queue_grant(a.port, b.port)
            finally:
                b.stop()
        finally:
            a.stop()
    assert seen["tidings"] == seen["reference"]
    assert seen["reference"][1][1].startswith(b"-ERR 'Permissions Violation")
