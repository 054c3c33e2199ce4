"""tidings.config.jwt: NATS JWTs decoded and verified as the reference's jwt library does,
every way one can fail, the reference server's checks (revocations, src, connect times,
signer scopes), .creds files; and cross-checked with an independent implementation, the
official JavaScript library @nats-io/jwt (npm), both ways.

The JavaScript library is installed with npm into tests/unit/config/node/node_modules
(ignored by git) the first time; those tests are skipped only when `node` is not installed.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import nkeys
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.harness.jwts import Key, account_jwt, operator_jwt, user_jwt
from tidings.config import jwt as J
from tidings.config.jwt import JwtError

NODE_DIR = Path(__file__).parent / "node"
DRIVER = NODE_DIR / "driver.js"

OP, OP2, ACC, ACC2, USER = (Key.new(k) for k in ("operator", "operator", "account", "account",
                                                 "user"))
NOW = 1_700_000_000


def b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def forge(payload: dict[str, Any] | str, seed: str, *, header: dict[str, Any] | str | None = None,
          over: Callable[[str, str], str] | None = None) -> str:
    """A token with exactly these parts: `over(head, body)` is what gets signed."""
    head = header if isinstance(header, str) else b64(json.dumps(
        header or {"typ": "JWT", "alg": "ed25519-nkey"}))
    body = payload if isinstance(payload, str) else b64(json.dumps(payload))
    signed = over(head, body) if over else f"{head}.{body}"
    return f"{head}.{body}.{b64(nkeys.from_seed(seed.encode()).sign(signed.encode()))}"


def user_payload(**nats: Any) -> dict[str, Any]:
    return {"sub": USER.public, "iss": ACC.public, "iat": NOW, "nats": {"type": "user",
                                                                       "version": 2, **nats}}


def fails(token: Any, match: str, now: float = NOW, **kw: Any) -> None:
    with pytest.raises(JwtError, match=match):
        J.decode(token, now, **kw)


# -- what decodes, and how it reads ---------------------------------------------------------


def test_a_user_jwt_reads_every_field() -> None:
    token = user_jwt(USER, ACC, std={"name": "bob", "exp": NOW + 60, "nbf": NOW - 60,
                                     "aud": "NATS"},
                     pub={"allow": ["a.>", "b"], "deny": ["a.secret"]},
                     sub={"allow": ["q.* workers"], "deny": ["x"]},
                     resp={"max": 3, "ttl": 5_000_000_000}, src=["10.0.0.0/8", "::1/128"],
                     times=[{"start": "08:00:00", "end": "17:00:00"}],
                     times_location="Europe/Prague", subs=7, data=2048, payload=512,
                     bearer_token=True, proxy_required=True,
                     allowed_connection_types=["STANDARD", "WEBSOCKET"], tags=["t1"],
                     issuer_account=ACC2.public)
    claims = J.decode(token, NOW)
    assert isinstance(claims, J.UserClaims)
    assert (claims.subject, claims.issuer, claims.name, claims.audience) == (
        USER.public, ACC.public, "bob", "NATS")
    assert (claims.expires, claims.not_before, claims.kind, claims.version) == (
        NOW + 60, NOW - 60, "user", 2)
    assert claims.tags == ("t1",) and claims.issuer_account == ACC2.public
    assert claims.account == ACC2.public
    u = claims.user
    assert u.pub == J.Permission(("a.>", "b"), ("a.secret",))
    assert u.sub == J.Permission(("q.* workers",), ("x",))
    assert u.resp == J.ResponsePermission(3, 5.0)
    assert u.permissions == J.Permissions(u.pub, u.sub, u.resp)
    assert u.src == ("10.0.0.0/8", "::1/128")
    assert u.times == (J.TimeRange("08:00:00", "17:00:00"),) and u.locale == "Europe/Prague"
    assert (u.subs, u.data, u.payload) == (7, 2048, 512)
    assert u.bearer_token and u.proxy_required
    assert u.allowed_connection_types == ("STANDARD", "WEBSOCKET")
    assert claims.raw["nats"]["times_location"] == "Europe/Prague"
    assert not claims.has_empty_permissions()


def test_an_absent_user_limit_is_zero_and_src_may_be_one_string() -> None:
    claims = J.decode_user(J.encode(user_payload(src="10.0.0.0/8, 127.0.0.1/32,,"), ACC.seed),
                           NOW)
    assert (claims.user.subs, claims.user.data, claims.user.payload) == (0, 0, 0)
    assert claims.user.src == ("10.0.0.0/8", "127.0.0.1/32")
    assert claims.user.resp is None
    assert claims.account == ACC.public


def test_an_account_jwt_reads_every_field() -> None:
    scoped = Key.new("account")
    token = account_jwt(ACC, OP, std={"name": "A"}, limits={
        "subs": 100, "data": 10, "payload": 4096, "imports": 5, "exports": 5, "conn": 10,
        "leaf": 2, "disallow_bearer": True, "mem_storage": 1024, "disk_storage": -1},
        exports=[{"name": "svc", "subject": "help.>", "type": "service", "response_type": "Stream",
                  "response_threshold": 2_000_000_000, "advertise": True, "allow_trace": True,
                  "service_latency": {"sampling": "headers", "results": "lat"},
                  "description": "d", "info_url": "https://x.example"},
                 {"subject": "feed.*", "type": "stream", "token_req": True,
                  "revocations": {ACC2.public: NOW}, "account_token_position": 2,
                  "service_latency": {"sampling": 50, "results": "r"}}],
        imports=[{"name": "i", "subject": "other.>", "account": ACC2.public, "type": "stream",
                  "local_subject": "mine.>", "allow_trace": True},
                 {"subject": "q", "account": ACC2.public, "type": "service", "share": True,
                  "to": "qq", "token": "eyJ.x.y"}],
        signing_keys=[ACC2.public, {"kind": "user_scope", "key": scoped.public, "role": "admin",
                                    "description": "sd",
                                    "template": {"pub": {"allow": ["s.>"]}, "subs": 3}}],
        revocations={USER.public: NOW, "*": NOW - 5},
        default_permissions={"pub": {"allow": ["dp.>"]}, "sub": {"deny": ["x"]},
                             "resp": {"max": 1, "ttl": 0}},
        mappings={"a": [{"subject": "b", "weight": 100}]},
        authorization={"auth_users": [USER.public]}, trace={"dest": "t", "sampling": 10},
        cluster_traffic="owner", description="acc", info_url="https://a.example", tags=["x"])
    claims = J.decode_account(token, NOW)
    assert claims.issuer == OP.public and claims.tags == ("x",)
    lim = claims.limits
    assert (lim.subs, lim.data, lim.payload, lim.imports, lim.exports, lim.conn, lim.leaf) == (
        100, 10, 4096, 5, 5, 10, 2)
    assert lim.wildcards and lim.disallow_bearer
    assert lim.jetstream == {"mem_storage": 1024, "disk_storage": -1}
    svc, feed = claims.exports
    assert (svc.name, svc.subject, svc.type, svc.response_type, svc.response_threshold) == (
        "svc", "help.>", "service", "Stream", 2.0)
    assert svc.latency == J.ServiceLatency(0, "lat") and svc.advertise and svc.allow_trace
    assert (svc.description, svc.info_url) == ("d", "https://x.example")
    assert feed.token_req and feed.revocations == {ACC2.public: NOW}
    assert feed.account_token_position == 2 and feed.latency == J.ServiceLatency(50, "r")
    stream, service = claims.imports
    assert stream == J.Import(subject="other.>", account=ACC2.public, type="stream", name="i",
                              local_subject="mine.>", allow_trace=True)
    assert (service.type, service.share, service.to, service.token) == ("service", True, "qq",
                                                                         "eyJ.x.y")
    assert claims.signing_keys[ACC2.public] is None
    scope = claims.signing_keys[scoped.public]
    assert scope is not None and (scope.key, scope.role, scope.description) == (
        scoped.public, "admin", "sd")
    # A template's absent limits are unlimited (the library's NewUserScope).
    assert scope.template.pub.allow == ("s.>",)
    assert (scope.template.subs, scope.template.data, scope.template.payload) == (3, -1, -1)
    assert claims.revocations == {USER.public: NOW, "*": NOW - 5}
    assert claims.default_permissions == J.Permissions(
        J.Permission(("dp.>",)), J.Permission((), ("x",)), J.ResponsePermission(1, 0.0))
    assert claims.mappings == {"a": (J.WeightedMapping("b", 100),)}
    assert claims.authorization == {"auth_users": [USER.public]}
    assert claims.trace == {"dest": "t", "sampling": 10} and claims.cluster_traffic == "owner"
    assert (claims.description, claims.info_url) == ("acc", "https://a.example")


def test_tiered_jetstream_limits_replace_the_untiered_ones() -> None:
    token = account_jwt(ACC, OP, limits={"mem_storage": 5, "tiered_limits": {"R1": {
        "mem_storage": 1}}})
    assert J.decode_account(token, NOW).limits.jetstream == {
        "tiered_limits": {"R1": {"mem_storage": 1}}}


def test_an_operator_jwt_reads_every_field_and_who_it_signed() -> None:
    token = operator_jwt(OP, signing_keys=[OP2.public], account_server_url="http://h:9090/jwt/v1",
                         operator_service_urls=["nats://h:4222", "wss://h:443"],
                         system_account=ACC.public, assert_server_version="2.10.0",
                         strict_signing_key_usage=True, tags=["prod"])
    claims = J.decode_operator(token, NOW)
    assert (claims.subject, claims.issuer, claims.signing_keys) == (OP.public, OP.public,
                                                                    (OP2.public,))
    assert claims.account_server_url == "http://h:9090/jwt/v1"
    assert claims.operator_service_urls == ("nats://h:4222", "wss://h:443")
    assert (claims.system_account, claims.assert_server_version) == (ACC.public, "2.10.0")
    assert claims.strict_signing_key_usage and claims.tags == ("prod",)
    by_signing_key = J.decode(account_jwt(ACC, OP2), NOW)
    by_identity = J.decode(account_jwt(ACC, OP), NOW)
    assert claims.did_sign(by_signing_key) and claims.did_sign(claims)
    assert not claims.did_sign(by_identity)  # strict: the identity key signs only itself
    lax = J.decode_operator(operator_jwt(OP), NOW)
    assert lax.did_sign(by_identity) and not lax.did_sign(by_signing_key)


def test_an_activation_jwt() -> None:
    token = J.encode({"sub": ACC.public, "nats": {"type": "activation", "kind": "stream",
                                                  "subject": "feed.x"}}, ACC2.seed)
    claims = J.decode_activation(token, NOW)
    assert (claims.import_subject, claims.import_type, claims.issuer) == ("feed.x", "stream",
                                                                         ACC2.public)


def test_v1_claims_signed_over_the_payload_alone() -> None:
    """A v1 JWT (`type`, `tags`, `issuer_account` at the top; `ed25519`) reads into the v2
    shapes; an absent user limit is unlimited there, as the library migrates it."""
    token = J.encode({"sub": USER.public, "type": "user", "tags": ["old"],
                      "issuer_account": ACC2.public, "nats": {"pub": {"allow": ["v1.>"]}}},
                     ACC.seed, now=NOW)
    assert json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))["alg"] == "ed25519"
    claims = J.decode_user(token, NOW)
    assert (claims.version, claims.tags, claims.issuer_account) == (1, ("old",), ACC2.public)
    assert claims.user.pub.allow == ("v1.>",)
    assert (claims.user.subs, claims.user.data, claims.user.payload) == (-1, -1, -1)
    account = J.decode_account(J.encode({"sub": ACC.public, "type": "account", "nats": {
        "signing_keys": [ACC2.public], "limits": {"imports": -1, "exports": -1}}}, OP.seed), NOW)
    assert account.signing_keys == {ACC2.public: None} and account.version == 1


def test_header_spellings_the_library_accepts() -> None:
    for header in ({"typ": "jwt", "alg": "ED25519-NKEY"}, {"typ": "JWT", "alg": "ed25519"}):
        assert J.decode(forge(user_payload(), ACC.seed, header=header), NOW).subject == USER.public


def test_the_encoder_fills_iss_iat_jti_and_the_version() -> None:
    token = J.encode({"sub": USER.public, "name": "n", "nats": {"type": "user"}}, ACC.seed,
                     now=NOW + 0.7)
    raw = J.decode(token, NOW).raw
    assert (raw["iss"], raw["iat"], raw["nats"]["version"]) == (ACC.public, NOW, 2)
    std = {"jti": "", "iat": NOW, "iss": ACC.public, "name": "n", "sub": USER.public}
    digest = hashlib.new("sha512_256", json.dumps(
        {k: std[k] for k in ("iat", "iss", "name", "sub")}, separators=(",", ":")).encode())
    assert raw["jti"] == base64.b32encode(digest.digest()).rstrip(b"=").decode()
    assert J.decode(J.encode({"sub": USER.public, "iat": 5, "nats": {"type": "user"}},
                             ACC.seed), NOW).issued_at == 5


def test_public_keys() -> None:
    assert J.is_public_key(OP.public, "operator") and J.is_public_key(USER.public, "user")
    assert not J.is_public_key(ACC.public, "user") and not J.is_public_key(ACC.seed, "account")
    broken = ACC.public[:-1] + ("A" if ACC.public[-1] != "A" else "B")
    assert J.public_key_bytes(broken) is None and J.public_key_bytes("a" * 56) is None
    assert J.public_key_bytes(ACC.public) == J.public_key_bytes(ACC.public, J.PREFIX_ACCOUNT)
    assert len(J.public_key_bytes(ACC.public) or b"") == 32


# -- every way to fail -------------------------------------------------------------------


def test_format_failures() -> None:
    good = forge(user_payload(), ACC.seed)
    head, body, sig = good.split(".")
    fails(None, "a JWT is a string")
    fails("e" * (J.MAX_TOKEN_SIZE + 1), "exceeds the maximum")
    fails(f"{head}.{body}", "expected 3 chunks")
    fails(f"{good}.x", "expected 3 chunks")
    fails(f"!!.{body}.{sig}", "header is not base64url")
    fails(f"{head}==.{body}.{sig}", "header is not base64url")  # no padding
    fails(f"{head}.{body[:-1]}+.{sig}", "payload is not base64url")  # url alphabet only
    fails(f"{b64('x')[:1]}.{body}.{sig}", "header is not base64url")  # impossible length
    fails(f"{b64('nope')}.{body}.{sig}", "header is not JSON")
    not_utf8 = b64(bytes([0xFF]))
    fails(f"{not_utf8}.{body}.{sig}", "header is not JSON")
    fails(f"{b64('[1]')}.{body}.{sig}", "header is not a JSON object")
    fails(f"{head}.{b64('{')}.{sig}", "payload is not JSON")
    fails(f"{head}.{body}.{sig[:-2]}!!", "signature is not base64url")


@pytest.mark.parametrize("header, match", [
    ({"typ": "JOSE", "alg": "ed25519-nkey"}, "unsupported type 'JOSE'"),
    ({"alg": "ed25519-nkey"}, "unsupported type None"),
    ({"typ": "JWT", "alg": "HS256"}, "unexpected algorithm 'HS256'"),
    ({"typ": "JWT", "alg": "ed25519-nkeyx"}, "unexpected algorithm"),
    ({"typ": "JWT", "alg": 1}, "unexpected algorithm 1"),
])
def test_header_failures(header: dict[str, Any], match: str) -> None:
    fails(forge(user_payload(), ACC.seed, header=header), match)


@pytest.mark.parametrize("nats, match", [
    ({"type": "user", "version": 3}, "generated by a newer version"),
    ({"type": "user"}, "version 0 is not supported"),
    ({"type": "generic", "version": 2}, "unsupported claim type 'generic'"),
    ({"type": "authorization_request", "version": 2}, "unsupported claim type"),
    ({"version": 2}, "the JWT has no claim type"),
    ({"type": 5, "version": 2}, "claim field nats.type is not a string"),
])
def test_claim_type_failures(nats: dict[str, Any], match: str) -> None:
    fails(forge({"sub": USER.public, "iss": ACC.public, "nats": nats}, ACC.seed), match)


def test_signature_failures() -> None:
    good = forge(user_payload(), ACC.seed)
    head, body, sig = good.split(".")
    tampered = b64(json.dumps(user_payload(pub={"allow": [">"]})))
    fails(f"{head}.{tampered}.{sig}", "claim failed V2 signature verification")
    fails(forge(user_payload(), ACC2.seed), "claim failed V2 signature verification")
    fails(f"{head}.{body}.", "claim failed V2 signature verification")
    fails(f"{head}.{body}.{sig[:20]}", "claim failed V2 signature verification")
    # v2 is signed over header.payload, v1 over the payload alone: never the other way.
    fails(forge(user_payload(), ACC.seed, over=lambda h, b: b), "V2 signature verification")
    v1 = {"sub": USER.public, "iss": ACC.public, "type": "user", "nats": {}}
    fails(forge(v1, ACC.seed, header={"typ": "JWT", "alg": "ed25519"}),
          "claim failed V1 signature verification")
    assert J.decode(forge(v1, ACC.seed, header={"typ": "JWT", "alg": "ed25519"},
                          over=lambda h, b: b), NOW).version == 1


def test_issuer_failures() -> None:
    fails(forge({**user_payload(), "iss": "nope"}, ACC.seed), "issuer 'nope' is not a public NKey")
    fails(forge({**user_payload(), "iss": ""}, ACC.seed), "issuer '' is not a public NKey")
    fails(user_jwt(USER, OP), f"user JWT issuer {OP.public} is not an account key")
    fails(operator_jwt(OP, signer=ACC), "operator JWT issuer .* is not an operator key")
    fails(account_jwt(ACC, USER), "account JWT issuer .* is not an account or an operator key")


def test_the_wrong_claim_type() -> None:
    token = user_jwt(USER, ACC)
    fails(token, "not account claims: the JWT holds user claims", expect="account")
    for decode in (J.decode_account, J.decode_operator, J.decode_activation):
        with pytest.raises(JwtError, match="holds user claims"):
            decode(token, NOW)


def test_expiry_and_not_before_at_second_resolution() -> None:
    token = user_jwt(USER, ACC, std={"exp": NOW + 10, "nbf": NOW - 10})
    assert J.decode(token, NOW + 10.9).expires == NOW + 10  # still in its last second
    fails(token, r"claim is expired \(exp 1700000010, now 1700000011\)", now=NOW + 11)
    assert J.decode(token, NOW - 10).not_before == NOW - 10
    fails(token, "claim is not yet valid", now=NOW - 11)
    assert J.decode(user_jwt(USER, ACC, std={"exp": 0, "nbf": 0}), 0).expires == 0  # unset
    with pytest.raises(JwtError, match="claim is expired"):  # `now` defaults to the clock
        J.decode(user_jwt(USER, ACC, std={"exp": int(time.time()) - 5}))


@pytest.mark.parametrize("payload, match", [
    ({"exp": "soon"}, "claim field exp is not an integer"),
    ({"iat": 1.5}, "claim field iat is not an integer"),
    ({"iat": True}, "claim field iat is not an integer"),
    ({"sub": 5}, "claim field sub is not a string"),
    ({"nats": []}, "claim field nats is not an object"),
    ({"nats": {"type": "user", "version": 2, "pub": []}}, "field nats.pub is not an object"),
    ({"nats": {"type": "user", "version": 2, "pub": {"allow": "x"}}},
     "field nats.pub.allow is not a list"),
    ({"nats": {"type": "user", "version": 2, "pub": {"allow": [1]}}},
     "field nats.pub.allow is not a list of strings"),
    ({"nats": {"type": "user", "version": 2, "src": 5}}, "field nats.src is not a list"),
    ({"nats": {"type": "user", "version": 2, "times": ["x"]}}, "nats.times is not a list of obj"),
    ({"nats": {"type": "user", "version": 2, "bearer_token": "yes"}},
     "field nats.bearer_token is not a boolean"),
    ({"nats": {"type": "user", "version": 2, "resp": {"ttl": "1s"}}},
     "field nats.resp.ttl is not an integer"),
])
def test_fields_of_the_wrong_json_type(payload: dict[str, Any], match: str) -> None:
    fails(forge({**user_payload(), **payload}, ACC.seed), match)


@pytest.mark.parametrize("nats, match", [
    ({"exports": [{"subject": "a", "type": "pipe"}]}, "unknown export type 'pipe'"),
    ({"imports": [{"subject": "a", "account": "A", "type": 1}]}, "imports.type is not a string"),
    ({"signing_keys": [{"kind": "admin_scope", "key": "A"}]}, "unknown signing key scope"),
    ({"signing_keys": [5]}, "nats.signing_keys is not a list of keys and scopes"),
    ({"revocations": {"U": "yesterday"}}, "nats.revocations.U is not an integer"),
    ({"exports": [{"subject": "a", "type": "service",
                   "service_latency": {"sampling": "often"}}]}, "is not an integer or \"headers\""),
])
def test_account_fields_the_library_cannot_read(nats: dict[str, Any], match: str) -> None:
    fails(account_jwt(ACC, OP, **nats), match)


@pytest.mark.parametrize("fields, match", [
    ({"src": ["127.0.0.1"]}, "invalid cidr '127.0.0.1'"),
    ({"src": ["10.0.0.0/255.0.0.0"]}, "invalid cidr"),
    ({"src": ["10.0.0.0/33"]}, "invalid cidr"),
    ({"src": ["fe80::%eth0/64"]}, "invalid cidr"),
    ({"times": [{"start": "25:00:00", "end": "26:00:00"}]}, "start in time range is invalid"),
    ({"times": [{"start": "8:00", "end": "09:00:00"}]}, "start in time range is invalid '8:00'"),
    ({"times": [{"start": "08:00:00"}]}, "end in time range is invalid ''"),
    ({"times_location": "Nowhere/Else"}, "could not parse iana time zone"),
    ({"times_location": "../etc/passwd"}, "could not parse iana time zone"),
    ({"issuer_account": USER.public}, "issuer_account .* is not an account public key"),
    ({"pub": {"allow": ["a q"]}}, "not allowed to contain a queue"),
    ({"sub": {"allow": ["a q r"]}}, "contains too many spaces"),
    ({"sub": {"deny": ["a..b"]}}, "cannot contain consecutive"),
    ({"pub": {"allow": [".a"]}}, "cannot start or end with"),
    ({"pub": {"allow": [""]}}, "subject cannot be empty"),
])
def test_user_claims_the_reference_refuses(fields: dict[str, Any], match: str) -> None:
    fails(user_jwt(USER, ACC, **fields), f"invalid user claims: .*{match}")


def test_user_claims_that_are_fine() -> None:
    for fields in ({"times_location": "Local"}, {"times_location": "UTC"},
                   {"src": ["10.0.0.1/8", "::/0"]}, {"sub": {"allow": ["a q"]}},
                   {"times": [{"start": "8:00:00", "end": "23:59:59"}]}):
        J.decode(user_jwt(USER, ACC, **fields), NOW)


@pytest.mark.parametrize("nats, match", [
    ({"signing_keys": [USER.public]}, "signing key .* is not an account public key"),
    ({"signing_keys": [{"kind": "user_scope", "key": "nope"}]}, "signing key nope is not"),
    ({"signing_keys": [{"kind": "user_scope", "key": ACC2.public,
                        "template": {"src": ["x"]}}]}, "invalid cidr 'x'"),
    ({"imports": [{"subject": "a", "account": ACC2.public}]}, "invalid import type for 'a'"),
    ({"imports": [{"subject": "a", "type": "stream"}]}, "account to import 'a' from is not"),
    ({"exports": [{"subject": "a b", "type": "stream"}]}, "cannot have spaces"),
    ({"exports": [{"subject": "a"}]}, "invalid export type for 'a'"),
    ({"limits": {"imports": 1}, "imports": [
        {"subject": s, "account": ACC2.public, "type": "stream"} for s in ("a", "b")]},
     "more imports than allowed"),
    ({"limits": {"exports": 1}, "exports": [
        {"subject": s, "type": "stream"} for s in ("a", "b")]}, "more exports than allowed"),
    ({"limits": {"exports": 5, "wildcards": False},
      "exports": [{"subject": "a.>", "type": "stream"}]}, "wildcard exports that are not allowed"),
    ({"default_permissions": {"pub": {"allow": ["a q"]}}}, "not allowed to contain a queue"),
    ({"cluster_traffic": "everyone"}, "unknown cluster traffic option"),
])
def test_account_claims_the_reference_refuses(nats: dict[str, Any], match: str) -> None:
    fails(account_jwt(ACC, OP, **nats), f"invalid account claims: .*{match}")


def test_an_account_without_limits_allows_no_imports() -> None:
    """The library checks the import count against `limits.imports` even when the JWT has no
    limits (0); unlimited is -1."""
    nats = {"type": "account", "imports": [{"subject": "a", "account": ACC2.public,
                                            "type": "stream"}]}
    fails(J.encode({"sub": ACC.public, "nats": nats}, OP.seed), "more imports than allowed")
    J.decode(J.encode({"sub": ACC.public, "nats": {**nats, "limits": {"imports": -1}}}, OP.seed),
             NOW)


@pytest.mark.parametrize("nats, match", [
    ({"signing_keys": [ACC.public]}, "signing key .* is not an operator public key"),
    ({"system_account": OP.public}, "system_account .* is not an account public key"),
    ({"assert_server_version": "2.10"}, "assert server version error"),
    ({"account_server_url": "host/jwt"}, "requires a protocol"),
    ({"operator_service_urls": ["http://h:4222"]}, "protocol not supported"),
])
def test_operator_claims_the_reference_refuses(nats: dict[str, Any], match: str) -> None:
    fails(operator_jwt(OP, **nats), f"invalid operator claims: .*{match}")


def test_activation_claims_the_reference_refuses() -> None:
    token = J.encode({"sub": ACC.public, "nats": {"type": "activation", "subject": "a"}},
                     ACC2.seed)
    fails(token, "invalid activation claims: invalid import type")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20)
FIELDS = st.sampled_from(["pub", "sub", "resp", "src", "times", "times_location", "subs",
                          "bearer_token", "imports", "exports", "limits", "signing_keys",
                          "revocations", "default_permissions", "issuer_account", "kind",
                          "subject", "system_account", "tags", "version"])


@settings(max_examples=300, deadline=None, database=None)
@given(kind=st.sampled_from(["user", "account", "operator", "activation"]),
       fields=st.dictionaries(FIELDS, JSON, max_size=4), top=st.dictionaries(
           st.sampled_from(["exp", "nbf", "iat", "sub", "name", "type", "tags"]), JSON,
           max_size=2))
def test_signed_claims_of_any_shape_decode_or_fail_with_a_jwt_error(
        kind: str, fields: dict[str, Any], top: dict[str, Any]) -> None:
    seed = OP.seed if kind == "operator" else ACC.seed
    token = J.encode({**top, "sub": USER.public, "nats": {**fields, "type": kind}}, seed)
    try:
        J.decode(token, NOW)
    except JwtError:
        pass


@settings(max_examples=300, deadline=None, database=None)
@given(st.text(alphabet="eyJ0.-_abcXYZ=+/ \n", max_size=80) | st.text(max_size=40))
def test_any_text_decodes_or_fails_with_a_jwt_error(text: str) -> None:
    try:
        J.decode(text, NOW)
    except JwtError:
        pass


def test_deeply_nested_json_fails_with_a_jwt_error() -> None:
    fails(forge(b64("[" * 100_000), ACC.seed), "payload is nested too deeply")


# -- the server's checks -----------------------------------------------------------------


def _account(**nats: Any) -> J.AccountClaims:
    return J.decode_account(account_jwt(ACC, OP, **nats), NOW)


def _user(**nats: Any) -> J.UserClaims:
    return J.decode_user(user_jwt(USER, ACC, **nats), NOW)


def test_revocations_as_the_reference_judges_them() -> None:
    other = Key.new("user").public
    acc = _account(revocations={USER.public: NOW})
    assert J.is_revoked(acc, USER.public, NOW - 1) and J.is_revoked(acc, USER.public, NOW)
    assert not J.is_revoked(acc, USER.public, NOW + 1)
    assert not J.is_revoked(acc, other, 0)
    every = _account(revocations={"*": NOW, USER.public: NOW - 100})
    assert J.is_revoked(every, other, NOW) and J.is_revoked(every, USER.public, NOW - 50)
    assert not J.is_revoked(every, other, NOW + 1)
    later = _account(revocations={"*": NOW - 100, USER.public: NOW})
    assert J.is_revoked(later, USER.public, NOW) and not J.is_revoked(later, other, NOW)
    assert not J.is_revoked(_account(), USER.public, 0)


def test_source_networks() -> None:
    assert J.source_allowed(_user(), "203.0.113.9")  # no src: anywhere
    user = _user(src=["10.0.0.0/8", "2001:db8::/32"])
    assert J.source_allowed(user, "10.1.2.3") and J.source_allowed(user, "2001:db8::1")
    assert J.source_allowed(user, "::ffff:10.1.2.3")  # IPv4-mapped: the IPv4 address
    for ip in ("11.0.0.1", "2001:db9::1", "", "nonsense", "fe80::1%eth0", "10.1.2.3:4222"):
        assert not J.source_allowed(user, ip), ip
    # An invalid entry refuses when reached before a match, as the reference's loop does
    # (decode refuses such a JWT; claims built by hand can still hold one).
    bad_first = J.UserClaims(USER.public, ACC.public, user=J.UserPermissionLimits(
        src=("bogus", "10.0.0.0/8")))
    bad_last = J.UserClaims(USER.public, ACC.public, user=J.UserPermissionLimits(
        src=("10.0.0.0/8", "bogus")))
    assert not J.source_allowed(bad_first, "10.0.0.1") and J.source_allowed(bad_last, "10.0.0.1")


def _utc(hour: int, minute: int = 0, second: int = 0, day: int = 1, month: int = 3) -> float:
    return datetime(2024, month, day, hour, minute, second, tzinfo=timezone.utc).timestamp()


def _windows(*ranges: tuple[str, str], locale: str = "UTC") -> J.UserClaims:
    return _user(times=[{"start": s, "end": e} for s, e in ranges], times_location=locale)


def test_connect_times() -> None:
    assert J.connect_window(_user(), _utc(3)) == float("inf") and J.user_allowed_now(_user())
    office = _windows(("08:00:00", "17:00:00"))
    assert J.connect_window(office, _utc(12)) == 5 * 3600
    assert J.user_allowed_now(office, _utc(12)) and not J.user_allowed_now(office, _utc(18))
    assert not J.user_allowed_now(office, _utc(8))  # strictly after the start...
    assert not J.user_allowed_now(office, _utc(17))  # ... and before the end
    night = _windows(("22:00:00", "06:00:00"))
    assert J.connect_window(night, _utc(5)) == 3600  # after midnight
    assert J.connect_window(night, _utc(23, 30)) == 6.5 * 3600  # before midnight
    assert not J.user_allowed_now(night, _utc(12))
    both = _windows(("08:00:00", "17:00:00"), ("10:00:00", "20:00:00"))
    assert J.connect_window(both, _utc(12)) == 8 * 3600  # the longest open window
    assert not J.user_allowed_now(_windows(("10:00:00", "10:00:00")), _utc(10))


def test_connect_times_in_the_user_location() -> None:
    morning = _windows(("06:00:00", "08:00:00"), locale="America/New_York")
    assert J.connect_window(morning, _utc(12)) == 3600  # 07:00 in New York
    assert not J.user_allowed_now(morning, _utc(7))
    # Across the switch to summer time: 00:00 CET to 04:00 CEST is 3 hours long.
    prague = _windows(("00:00:00", "04:00:00"), locale="Europe/Prague")
    assert J.connect_window(prague, _utc(1, 30, day=31)) == 1800  # 03:30 CEST
    unknown = J.UserClaims(USER.public, ACC.public, user=J.UserPermissionLimits(
        times=(J.TimeRange("00:00:00", "23:59:59"),), locale="Nowhere/Else"))
    assert not J.user_allowed_now(unknown, _utc(12))


@pytest.fixture
def tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_connect_times_without_a_location_are_the_local_time(tokyo: None) -> None:
    for locale in ("", "Local"):
        user = _windows(("08:00:00", "10:00:00"), locale=locale)
        assert J.connect_window(user, _utc(0)) == 3600, locale  # 09:00 in Tokyo


def test_who_may_sign_an_accounts_users() -> None:
    scoped = Key.new("account")
    acc = _account(signing_keys=[ACC2.public, {"kind": "user_scope", "key": scoped.public,
                                               "template": {"pub": {"allow": ["s"]}}}])
    assert acc.signer_scope(ACC.public) == (True, None)
    assert acc.signer_scope(ACC.public, strict=True) == (False, None)
    assert acc.signer_scope(ACC2.public, strict=True) == (True, None)
    known, scope = acc.signer_scope(scoped.public)
    assert known and scope is not None and scope.template.pub.allow == ("s",)
    assert acc.signer_scope(Key.new("account").public) == (False, None)
    scoped_user = J.decode_user(user_jwt(USER, scoped, scoped=True, issuer_account=ACC.public),
                                NOW)
    assert scoped_user.has_empty_permissions() and scoped_user.account == ACC.public


# -- creds files -------------------------------------------------------------------------


def test_creds_files() -> None:
    token = user_jwt(USER, ACC)
    text = J.format_creds(token, USER.seed)
    assert text.startswith("-----BEGIN NATS USER JWT-----\n")
    assert J.read_creds(text) == (token, USER.seed)
    assert J.read_creds(text.replace("\n", "\r\n")) == (token, USER.seed)
    assert J.read_creds(f"  {token}\n\n{USER.seed}\n") == (token, USER.seed)  # undecorated
    with pytest.raises(JwtError, match="no nkey seed found"):
        J.read_creds(text.split("*****")[0])
    with pytest.raises(JwtError, match="no JWT found"):
        J.read_creds("-----BEGIN X-----\nnotajwt\n------END X------\n")
    with pytest.raises(JwtError, match="do not contain a seed nkey"):
        J.read_creds(text.replace(USER.seed, USER.public))


# -- the JavaScript library (@nats-io/jwt), both ways --------------------------------------


@pytest.fixture(scope="module")
def node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the @nats-io/jwt tests need Node.js and npm")
    npm = shutil.which("npm")
    assert npm is not None, "node is installed but npm is not: cannot install @nats-io/jwt"
    modules = NODE_DIR / "node_modules"  # ignored by git, like the lock file inside it
    modules.mkdir(exist_ok=True)
    with open(modules / ".tidings-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (modules / "@nats-io" / "jwt" / "package.json").exists():
            out = subprocess.run(
                [npm, "install", "--no-package-lock", "--no-audit", "--no-fund", "--silent"],
                cwd=NODE_DIR, capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, f"npm install @nats-io/jwt failed:\n{out.stderr}"
    return node


def drive(node: str, request: dict[str, Any]) -> Any:
    out = subprocess.run([node, str(DRIVER)], input=json.dumps(request), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, f"node driver failed:\n{out.stderr}"
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def minted(node: str) -> dict[str, Any]:
    return drive(node, {"op": "mint"})


def test_their_operator_and_account_decode_as_they_wrote_them(minted: dict[str, Any]) -> None:
    k, now, t = minted["keys"], minted["now"], minted["tokens"]
    op = J.decode_operator(t["operator"], now)
    assert (op.subject, op.issuer, op.name, op.audience) == (k["operator"]["pub"],
                                                              k["operator"]["pub"], "OP", "NATS")
    assert op.signing_keys == (k["opSigner"]["pub"],)
    assert op.system_account == k["system"]["pub"]
    assert op.operator_service_urls == ("nats://127.0.0.1:4222",)
    acc = J.decode_account(t["account"], now)
    assert acc.issuer == k["opSigner"]["pub"] and op.did_sign(acc)
    assert acc.expires == now + 3600 and acc.tags == ("Blue",)
    assert (acc.limits.subs, acc.limits.conn, acc.limits.leaf, acc.limits.payload) == (
        100, 10, 2, 4096)
    assert acc.limits.jetstream == {"mem_storage": 1024, "disk_storage": -1}
    svc, feed = sorted(acc.exports, key=lambda e: e.name)[::-1]
    assert (svc.type, svc.response_type, svc.response_threshold) == ("service", "Stream", 2.0)
    assert svc.latency == J.ServiceLatency(0, "lat.results")
    assert feed.revocations == {k["exporter"]["pub"]: now} and feed.account_token_position == 2
    assert {i.name: (i.type, i.local_subject, i.share) for i in acc.imports} == {
        "other": ("stream", "mine.>", False), "otherSvc": ("service", "", True)}
    assert acc.signing_keys[k["accSigner"]["pub"]] is None
    scope = acc.signing_keys[k["scopedSigner"]["pub"]]
    assert scope is not None and scope.role == "admin" and scope.template.subs == 10
    assert scope.template.pub.allow == ("scoped.>",) and scope.template.data == -1
    assert acc.revocations == {k["user"]["pub"]: now - 10, "*": now - 100}
    assert acc.default_permissions.pub == J.Permission(("dp.>",), ("dp.no",))
    assert (acc.description, acc.info_url) == ("an account", "https://example.com/acc")


def test_their_users_decode_as_they_wrote_them(minted: dict[str, Any]) -> None:
    k, now, t = minted["keys"], minted["now"], minted["tokens"]
    acc = J.decode_account(t["account"], now)
    user = J.decode_user(t["user"], now)
    assert (user.issuer, user.not_before, user.expires) == (k["account"]["pub"], now - 60,
                                                             now + 600)
    u = user.user
    assert u.pub == J.Permission(("a.>", "b"), ("a.secret",))
    assert u.sub.allow == ("a.>", "q.* workers") and u.resp == J.ResponsePermission(3, 5.0)
    assert u.src == ("127.0.0.0/8", "10.1.0.0/16")
    assert u.times == (J.TimeRange("08:00:00", "17:30:00"), J.TimeRange("22:00:00", "02:00:00"))
    assert (u.locale, u.subs, u.data, u.payload) == ("Europe/Prague", 7, 2048, 512)
    assert u.bearer_token and u.allowed_connection_types == ("STANDARD", "WEBSOCKET")
    assert J.source_allowed(user, "127.0.0.1") and not J.source_allowed(user, "10.2.0.1")
    assert not J.is_revoked(acc, user.subject, user.issued_at)  # issued after both
    assert J.is_revoked(acc, user.subject, now - 10) and J.is_revoked(acc, "U", now - 100)
    by_key = J.decode_user(t["signedByKey"], now)
    assert by_key.issuer_account == k["account"]["pub"]
    assert acc.signer_scope(by_key.issuer) == (True, None)
    scoped = J.decode_user(t["scopedUser"], now)
    assert scoped.has_empty_permissions()
    assert acc.signer_scope(scoped.issuer)[1] is acc.signing_keys[k["scopedSigner"]["pub"]]
    v1 = J.decode_user(t["v1User"], now)
    assert v1.version == 1 and v1.user.pub.allow == ("v1.>",) and v1.user.subs == -1
    act = J.decode_activation(t["activation"], now)
    assert (act.import_type, act.import_subject) == ("stream", f"feed.{k['account']['pub']}")


def test_their_tokens_tampered_with_fail_ours(minted: dict[str, Any]) -> None:
    head, body, sig = minted["tokens"]["user"].split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload["nats"]["pub"]["allow"] = [">"]
    fails(f"{head}.{b64(json.dumps(payload))}.{sig}", "signature verification",
          now=minted["now"])
    fails(minted["tokens"]["user"], "claim is expired", now=minted["now"] + 601)


def test_their_creds_file_reads(minted: dict[str, Any]) -> None:
    assert J.read_creds(minted["creds"]) == (minted["tokens"]["user"],
                                             minted["keys"]["user"]["seed"])


def test_our_tokens_verify_with_their_library(node: str) -> None:
    scoped = Key.new("account")
    ours = [
        operator_jwt(OP, signing_keys=[OP2.public], system_account=ACC2.public),
        account_jwt(ACC, OP2, signing_keys=[ACC2.public, {"kind": "user_scope",
                                                          "key": scoped.public,
                                                          "template": {"subs": 1}}],
                    exports=[{"subject": "e.>", "type": "service"}],
                    revocations={"*": NOW}),
        user_jwt(USER, ACC, pub={"allow": ["a"]}, src=["10.0.0.0/8"],
                 times=[{"start": "01:00:00", "end": "02:00:00"}], bearer_token=True),
        user_jwt(USER, scoped, scoped=True, issuer_account=ACC.public),
        J.encode({"sub": USER.public, "type": "user", "nats": {}}, ACC.seed),  # v1
    ]
    head, body, sig = ours[2].split(".")
    tampered = f"{head}.{b64(json.dumps({**J.decode(ours[2], NOW).raw, 'name': 'x'}))}.{sig}"
    answers = drive(node, {"op": "decode", "tokens": [*ours, tampered]})
    for token, answer in zip(ours, answers[:-1], strict=True):
        assert answer == {"ok": True, "payload": J.decode(token, NOW).raw}
    assert answers[-1] == {"ok": False, "error": "sig verification failed"}


def test_our_creds_file_reads_with_their_library(node: str) -> None:
    token = user_jwt(USER, ACC)
    answer = drive(node, {"op": "parseCreds", "creds": J.format_creds(token, USER.seed)})
    assert answer == {"jwt": token, "key": USER.seed}
