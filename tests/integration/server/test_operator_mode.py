"""Operator mode (`resolver: MEMORY`, accounts preloaded), tidings and the reference
nats-server on the same configuration: the JWTs our encoder mints are the reference's JWTs
(nats-py connects with a `.creds` file we wrote), for each user JWT the reference accepts or
refuses, tidings.config.jwt's checks (times, signer, scope, revocations, src, connect times)
say the same, and so does a tidings server in operator mode."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import nkeys
import pytest

from tests.harness import Server, start_configured, workdir
from tests.harness.jwts import (
    Key,
    account_jwt,
    operator_config,
    operator_jwt,
    user_jwt,
    write_creds,
)
from tests.harness.rawnats import RawConn
from tidings.config.jwt import (
    JwtError,
    decode_account,
    decode_user,
    encode,
    is_revoked,
    read_creds,
    source_allowed,
    user_allowed_now,
)

pytestmark = pytest.mark.timeout(60)

HOST = "127.0.0.1"


@dataclass
class World:
    """One reference server trusting one operator, its accounts, and the user JWTs."""

    server: Server
    accounts: dict[str, str]  # public key: account JWT (as preloaded)
    users: dict[str, tuple[str, Path]]  # case: (user JWT, creds file)


def _clock(seconds: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(seconds))


def _users(now: int, a: Key, sk: Key, scoped: Key, b: Key, c: Key, d: Key, op: Key,
           revoked: Key, all_cut: int) -> dict[str, tuple[Key, str, bool]]:
    """case: (user key, user JWT, whether the reference accepts it)."""
    out: dict[str, tuple[Key, str, bool]] = {}

    def add(case: str, signer: Key, accepted: bool, user: Key | None = None,
            std: dict | None = None, **nats_fields) -> None:
        user = user or Key.new("user")
        out[case] = (user, user_jwt(user, signer, std=std, **nats_fields), accepted)

    add("plain", a, True, pub={"allow": ["x.>"]}, sub={"allow": ["x.>", "_INBOX.>"]})
    add("signing_key", sk, True, issuer_account=a.public)
    add("scoped_key", scoped, True, issuer_account=a.public, scoped=True)
    add("scoped_key_with_own_permissions", scoped, False, issuer_account=a.public,
        scoped=True, pub={"allow": ["x"]})
    add("unknown_signing_key", Key.new("account"), False, issuer_account=a.public)
    add("revoked_at_issue", a, False, user=revoked, std={"iat": now - 50})
    add("issued_after_revocation", a, True, user=revoked, std={"iat": now - 49})
    add("all_revoked", b, False, std={"iat": all_cut})
    add("issued_after_all_revoked", b, True, std={"iat": all_cut + 1})
    add("not_expired", a, True, std={"nbf": now - 60, "exp": now + 600})
    add("expired", a, False, std={"iat": now - 100, "exp": now - 10})
    add("not_yet_valid", a, False, std={"nbf": now + 600})
    add("src_includes", a, True, src=["10.0.0.0/8", "127.0.0.0/8"])
    add("src_as_one_string", a, True, src="10.0.0.0/8,127.0.0.1/32")
    add("src_excludes", a, False, src=["10.0.0.0/8"])
    add("invalid_cidr", a, False, src=["127.0.0.1"])
    add("times_now", a, True, times=[{"start": _clock(now - 3600), "end": _clock(now + 3600)}],
        times_location="UTC")
    add("times_elsewhen", a, False, times_location="UTC",
        times=[{"start": _clock(now + 3600), "end": _clock(now + 7200)}])
    add("unknown_location", a, False, times_location="Nowhere/Else",
        times=[{"start": "00:00:00", "end": "23:59:59"}])
    add("bearer", a, True, bearer_token=True)
    add("bearer_disallowed", c, False, bearer_token=True)
    add("expired_account", d, False)
    add("unknown_account", Key.new("account"), False)
    add("signed_by_the_operator", op, False)
    add("without_limits", a, True, scoped=True)  # not scoped: just no limits at all
    v1 = Key.new("user")  # a v1 JWT: `type` at the top, signed over the payload alone
    out["v1"] = (v1, encode({"sub": v1.public, "type": "user", "nats": {"subs": -1}}, a.seed), True)
    v2 = Key.new("user")  # a v2 JWT whose header names the v1 algorithm
    out["v2_with_v1_algorithm"] = (v2, encode(
        {"sub": v2.public, "nats": {"type": "user", "subs": -1, "data": -1, "payload": -1}},
        a.seed, algorithm="ed25519"), True)
    return out


@pytest.fixture(scope="module", params=["reference", "tidings"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    now = int(time.time())
    op, a, b, c, d = (Key.new(k) for k in ("operator", "account", "account", "account",
                                           "account"))
    sk, scoped, revoked = Key.new("account"), Key.new("account"), Key.new("user")
    all_cut = now - 20
    template = {"pub": {"allow": ["scoped.>"]}, "sub": {"allow": ["_INBOX.>"]},
                "subs": -1, "data": -1, "payload": -1}
    accounts = {
        a.public: account_jwt(a, op, signing_keys=[sk.public, {
            "kind": "user_scope", "key": scoped.public, "role": "r", "template": template}],
            revocations={revoked.public: now - 50}),
        b.public: account_jwt(b, op, revocations={"*": all_cut}),
        c.public: account_jwt(c, op, limits={"disallow_bearer": True}),
        d.public: account_jwt(d, op, std={"iat": now - 100, "exp": now - 10}),
    }
    directory = workdir("jwt")
    (directory / "op.jwt").write_text(operator_jwt(op))
    users = {case: (token, write_creds(directory / f"{case}.creds", token, user))
             for case, (user, token, _) in _users(now, a, sk, scoped, b, c, d, op, revoked,
                                                  all_cut).items()}
    server = start_configured(request.param, operator_config(directory / "op.jwt", accounts))
    yield World(server, accounts, users)
    server.stop()


def our_verdict(token: str, accounts: dict[str, str], ip: str = HOST) -> str | None:
    """Why tidings.config.jwt refuses this user JWT (None: accepted), in the reference's
    order of checks at CONNECT."""
    try:
        user = decode_user(token)
        if user.account not in accounts:
            return "unknown account"
        account = decode_account(accounts[user.account])
    except JwtError as e:
        return str(e)
    known, scope = account.signer_scope(user.issuer)
    if not known:
        return "the user JWT issuer is not known"
    if scope is not None and not user.has_empty_permissions():
        return "scoped users require no permissions or limits set"
    if user.user.bearer_token and account.limits.disallow_bearer:
        return "bearer tokens disallowed"
    if is_revoked(account, user.subject, user.issued_at):
        return "revoked"
    if not source_allowed(user, ip):
        return "bad src IP"
    if not user_allowed_now(user):
        return "outside connect times"
    return None


async def _connects(server: Server, creds: Path) -> bool:
    async def quiet(exc: Exception) -> None:
        pass

    try:
        nc = await nats.connect(server.url, user_credentials=str(creds), error_cb=quiet,
                                allow_reconnect=False, max_reconnect_attempts=0,
                                connect_timeout=5)
    except nats.errors.Error as e:
        assert "Authorization Violation" in str(e), e
        return False
    await nc.flush()
    await nc.close()
    return True


CASES = ("plain", "signing_key", "scoped_key", "scoped_key_with_own_permissions",
         "unknown_signing_key", "revoked_at_issue", "issued_after_revocation", "all_revoked",
         "issued_after_all_revoked", "not_expired", "expired", "not_yet_valid", "src_includes",
         "src_as_one_string", "src_excludes", "invalid_cidr", "times_now", "times_elsewhen",
         "unknown_location", "bearer", "bearer_disallowed", "expired_account",
         "unknown_account", "signed_by_the_operator", "v1", "v2_with_v1_algorithm")


@pytest.mark.parametrize("case", CASES)
async def test_the_server_and_our_checks_judge_a_user_jwt_alike(world: World,
                                                                 case: str) -> None:
    token, creds = world.users[case]
    ours = our_verdict(token, world.accounts)
    theirs = await _connects(world.server, creds)
    assert theirs == (ours is None), (case, ours)


def test_every_case_is_judged() -> None:
    assert set(CASES) | {"without_limits"} == set(_users(0, *(Key.new("account") for _ in range(7)),
                                    Key.new("user"), 0))


async def test_a_minted_user_talks_through_the_reference(world: World) -> None:
    """The user of the plain case, connected with our .creds: its permissions apply."""
    _, creds = world.users["plain"]
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    nc = await nats.connect(world.server.url, user_credentials=str(creds), error_cb=on_error,
                            allow_reconnect=False)
    try:
        sub = await nc.subscribe("x.>")
        await nc.publish("x.one", b"hello")
        await nc.publish("y.denied", b"no")
        msg = await sub.next_msg(timeout=5)
        assert (msg.subject, msg.data) == ("x.one", b"hello")
        await nc.flush()
    finally:
        await nc.close()
    assert any("permissions violation for publish" in str(e).lower() for e in errors), errors


def test_a_user_jwt_without_limits_may_not_subscribe(world: World) -> None:
    """An absent subs limit is 0 (not unlimited): the reference closes the connection
    right after CONNECT ('maximum subscriptions exceeded'), and we read 0."""
    token, creds = world.users["without_limits"]
    assert our_verdict(token, world.accounts) is None
    limits = decode_user(token).user
    assert (limits.subs, limits.data, limits.payload) == (0, 0, 0)
    _, seed = read_creds(creds.read_text())
    with RawConn(world.server.port) as conn:
        sig = nkeys.from_seed(seed.encode()).sign(conn.info["nonce"].encode())
        sig_text = base64.urlsafe_b64encode(sig).rstrip(b"=").decode()
        conn.send(f'CONNECT {{"jwt":"{token}","sig":"{sig_text}","verbose":false}}\r\n'.encode())
        assert conn.read_to_eof() == b"-ERR 'maximum subscriptions exceeded'\r\n"


def test_the_reference_warns_of_the_account_problems_we_refuse(tmp_path: Path) -> None:
    """An account whose claims our decoder refuses is one the reference warns about at
    start ("has validation issues"), with the same issue; a sound one draws no warning."""
    op = Key.new("operator")
    no_limits, wildcards, sound = Key.new("account"), Key.new("account"), Key.new("account")
    other = Key.new("account").public
    tokens = {
        # No `limits` at all: 0 imports allowed, as the reference's library reads it.
        no_limits.public: encode({"sub": no_limits.public, "nats": {"type": "account", "imports": [
            {"subject": "s", "account": other, "type": "stream"}]}}, op.seed),
        wildcards.public: account_jwt(wildcards, op, limits={"exports": 5, "wildcards": False},
                                      exports=[{"subject": "w.*", "type": "stream"}]),
        sound.public: account_jwt(sound, op, exports=[{"subject": "w.*", "type": "stream"}]),
    }
    (tmp_path / "op.jwt").write_text(operator_jwt(op))
    server = start_configured("reference", operator_config(tmp_path / "op.jwt", tokens))
    try:
        log = server.process_log.text()
    finally:
        server.stop()
    for key, issue in ((no_limits.public, "more imports than allowed by the operator"),
                       (wildcards.public, "wildcard exports that are not allowed")):
        assert f"Account [{key}] has validation issues" in log
        with pytest.raises(JwtError, match=issue):
            decode_account(tokens[key])
    assert f"Account [{sound.public}]" not in log
    assert decode_account(tokens[sound.public]).exports[0].subject == "w.*"


@pytest.mark.parametrize("kind", ["reference", "tidings"])
async def test_expiring_user_and_account_jwts_close_their_connections(
        kind: str, tmp_path: Path) -> None:
    """A connection whose user JWT expires gets 'User Authentication Expired'; the
    connections of an account whose JWT expires get 'Account Authentication Expired'."""
    import asyncio

    now = int(time.time())
    op, a, b = Key.new("operator"), Key.new("account"), Key.new("account")
    accounts = {a.public: account_jwt(a, op),
                b.public: account_jwt(b, op, std={"exp": now + 3})}
    (tmp_path / "op.jwt").write_text(operator_jwt(op))
    server = start_configured(kind, operator_config(tmp_path / "op.jwt", accounts))
    try:
        async def closed_with(signer: Key, exp: int | None) -> str:
            user = Key.new("user")
            std = {"exp": exp} if exp else None
            creds = write_creds(tmp_path / f"{user.public}.creds",
                                user_jwt(user, signer, std=std), user)
            errors: list[str] = []
            done = asyncio.Event()

            async def on_error(e: Exception) -> None:
                errors.append(str(e))

            async def on_closed() -> None:
                done.set()

            nc = await nats.connect(server.url, user_credentials=str(creds),
                                    allow_reconnect=False, error_cb=on_error,
                                    closed_cb=on_closed)
            await nc.flush()
            await asyncio.wait_for(done.wait(), 10)
            return " ".join([*errors, str(nc.last_error)])

        user_expiry = asyncio.ensure_future(closed_with(a, now + 2))
        account_expiry = asyncio.ensure_future(closed_with(b, None))
        assert "user authentication expired" in (await user_expiry).lower()
        assert "account authentication expired" in (await account_expiry).lower()
    finally:
        server.stop()


@pytest.mark.parametrize("signed", ["wrong nonce", "other key", "no signature", "garbage"])
def test_a_bad_nonce_signature_is_refused(world: World, signed: str) -> None:
    """The plain user's JWT with a signature that is not its key's over this connection's
    nonce: Authorization Violation, on both servers."""
    token, creds = world.users["plain"]
    _, seed = read_creds(creds.read_text())
    with RawConn(world.server.port) as conn:
        nonce = conn.info["nonce"].encode()
        key = nkeys.from_seed(seed.encode())
        if signed == "wrong nonce":
            sig = key.sign(nonce + b"x")
        elif signed == "other key":
            sig = nkeys.from_seed(Key.new("user").seed.encode()).sign(nonce)
        else:
            sig = b""
        text = base64.urlsafe_b64encode(sig).rstrip(b"=").decode()
        if signed == "garbage":
            text = "!!not base64!!"
        field = "" if signed == "no signature" else f',"sig":"{text}"'
        conn.send(f'CONNECT {{"jwt":"{token}"{field},"verbose":false}}\r\nPING\r\n'.encode())
        assert conn.read_to_eof() == b"-ERR 'Authorization Violation'\r\n"


@pytest.mark.parametrize("kind", ["reference", "tidings"])
async def test_a_full_resolver_takes_claims_updates(kind: str, tmp_path: Path) -> None:
    """`resolver { type: full }`: a system account user pushes a new account's JWT
    ($SYS.REQ.CLAIMS.UPDATE), its users log in; the JWT is looked up and listed; an update
    that revokes a connected user closes that user's connection."""
    import asyncio
    import json

    now = int(time.time())
    op, sys_acc, a, b = (Key.new(k) for k in ("operator", "account", "account", "account"))
    accounts = {sys_acc.public: account_jwt(sys_acc, op), a.public: account_jwt(a, op)}
    (tmp_path / "op.jwt").write_text(operator_jwt(op))
    jwt_dir = tmp_path / "jwt"
    preload = "\n".join(f"  {key}: {token}" for key, token in accounts.items())
    conf = (f'operator: "{tmp_path / "op.jwt"}"\nsystem_account: {sys_acc.public}\n'
            f'resolver {{ type: full, dir: "{jwt_dir}" }}\n'
            f"resolver_preload: {{\n{preload}\n}}\n")
    server = start_configured(kind, conf)

    def creds_for(account: Key, std: dict | None = None) -> str:
        user = Key.new("user")
        return str(write_creds(tmp_path / f"{user.public}.creds",
                               user_jwt(user, account, std=std), user))

    try:
        admin = await nats.connect(server.url, user_credentials=creds_for(sys_acc))
        token_b = account_jwt(b, op)
        reply = await admin.request("$SYS.REQ.CLAIMS.UPDATE", token_b.encode(), timeout=5)
        assert json.loads(reply.data)["data"] == {
            "account": b.public, "code": 200, "message": "jwt updated"}
        in_b = await nats.connect(server.url, user_credentials=creds_for(b))
        await in_b.flush()
        found = await admin.request(f"$SYS.REQ.ACCOUNT.{b.public}.CLAIMS.LOOKUP", b"",
                                    timeout=5)
        assert found.data.decode() == token_b
        listed = await admin.request("$SYS.REQ.CLAIMS.LIST", b"", timeout=5)
        assert {a.public, b.public, sys_acc.public} <= set(json.loads(listed.data)["data"])
        bad = await admin.request(f"$SYS.REQ.ACCOUNT.{a.public}.CLAIMS.UPDATE",
                                  token_b.encode(), timeout=5)
        error = json.loads(bad.data)["error"]
        assert error["code"] == 500 and error["account"] == a.public
        assert "subject does not match jwt content" in error["description"]

        closed = asyncio.Event()

        async def on_closed() -> None:
            closed.set()

        victim = await nats.connect(server.url, user_credentials=creds_for(a, {"iat": now - 10}),
                                    allow_reconnect=False, closed_cb=on_closed)
        await victim.flush()
        revoking = account_jwt(a, op, revocations={"*": now})
        reply = await admin.request(f"$SYS.REQ.ACCOUNT.{a.public}.CLAIMS.UPDATE",
                                    revoking.encode(), timeout=5)
        assert json.loads(reply.data)["data"]["message"] == "jwt updated"
        await asyncio.wait_for(closed.wait(), 10)
        assert "revoked" in str(victim.last_error).lower()
        for nc in (admin, in_b):
            await nc.close()
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["reference", "tidings"])
async def test_a_scoped_keys_template_is_filled_in_for_its_user(kind: str,
                                                               tmp_path: Path) -> None:
    """A scoped signing key's permissions name the user and its tags: each user gets its
    own subjects (one per tag value)."""
    import asyncio

    op, a, scoped = Key.new("operator"), Key.new("account"), Key.new("account")
    template = {"pub": {"allow": ["user.{{name()}}.>", "dept.{{tag(dept)}}"]},
                "sub": {"allow": ["_INBOX.>", "user.{{name()}}.>", "dept.>"]},
                "subs": -1, "data": -1, "payload": -1}
    accounts = {a.public: account_jwt(a, op, signing_keys=[{
        "kind": "user_scope", "key": scoped.public, "role": "r", "template": template}])}
    (tmp_path / "op.jwt").write_text(operator_jwt(op))
    server = start_configured(kind, operator_config(tmp_path / "op.jwt", accounts))
    try:
        user = Key.new("user")
        token = encode({"sub": user.public, "name": "alice", "nats": {
            "type": "user", "issuer_account": a.public, "tags": ["dept:eng", "dept:ops"]}},
            scoped.seed)
        creds = write_creds(tmp_path / "alice.creds", token, user)
        errors: list[str] = []

        async def on_error(e: Exception) -> None:
            errors.append(str(e).lower())

        nc = await nats.connect(server.url, user_credentials=str(creds), error_cb=on_error)
        try:
            mine = await nc.subscribe("user.alice.>")
            depts = await nc.subscribe("dept.>")
            await nc.flush()
            for subject in ("user.alice.x", "user.bob.x", "dept.eng", "dept.ops", "dept.hr"):
                await nc.publish(subject, b"")
            await nc.flush()
            assert (await mine.next_msg(timeout=5)).subject == "user.alice.x"
            got = {(await depts.next_msg(timeout=5)).subject for _ in range(2)}
            assert got == {"dept.eng", "dept.ops"}
            for _ in range(50):
                if len(errors) >= 2:
                    break
                await asyncio.sleep(0.05)  # (the -ERRs come asynchronously to error_cb)
            assert sorted(e for e in errors if "publish" in e) == [
                'nats: permissions violation for publish to "dept.hr"',
                'nats: permissions violation for publish to "user.bob.x"'], errors
        finally:
            await nc.close()
    finally:
        server.stop()
