"""The `accounts { }` block and `system_account`, checked by `tidings server -t -c FILE` and by
the reference's `nats-server -t -c FILE` on the same files: a good file is taken by both, a
bad one refused by both with the same message at the same `file:line:col`. What the
reference checks only at start (system_account, no_auth_user), tidings checks under -t
already; what tidings does not build yet is refused by name where the reference takes it.

Where the reference's answer depends on Go's random map order (which account or key it reads
first), it is run a few times and must give tidings' answer in one of them."""

from __future__ import annotations

from pathlib import Path

import nkeys
import pytest

from .test_config_file import reference, tidings

pytestmark = pytest.mark.timeout(120)

# Fixed keys: the test ids name them, and every pytest-xdist worker must collect the same.
ACCOUNT_NKEY = nkeys.from_seed(nkeys.encode_seed(bytes(range(32)), nkeys.PREFIX_BYTE_ACCOUNT)
                               ).public_key.decode()
USER_NKEY = nkeys.from_seed(nkeys.encode_seed(bytes(range(32)), nkeys.PREFIX_BYTE_USER)
                            ).public_key.decode()
TRIES = 10  # runs of the reference where its answer depends on Go's map order


def reference_says(conf: Path, line: str, *args: str) -> bool:
    """The reference, checking (-t) or starting with `conf`, refuses it saying `line`, in one
    of TRIES runs."""
    for _ in range(TRIES):
        out = reference(*args, "-c", str(conf))
        if out.returncode != 0 and line in out.stderr.splitlines()[0]:
            return True
    return False


EXPORTS = 'A: { exports: [{stream: "a.>"}, {service: "s.>"}] }'

GOOD = {
    "names": "accounts: [A, B]",
    "system account": "system_account: SYS\naccounts: [A, SYS]",
    "the global account as system account": 'system_account: "$G"',
    "$SYS is an account": "accounts { $SYS: {} }",
    "everything": f"""
accounts {{
  A: {{
    nkey: {ACCOUNT_NKEY}
    users: [{{user: a, password: a}}, {{nkey: {USER_NKEY}}}]
    default_permissions: {{publish: "a.>", subscribe: ["a.>", "_INBOX.>"]}}
    limits: {{max_connections: 10, max_subs: 100, max_payload: 1MB, max_leafnodes: 1}}
    exports: [
      {{stream: "pub.>"}}
      {{stream: "priv.>", accounts: [B]}}
      {{service: "svc.>", response_type: singleton, response_threshold: "2s",
        latency: {{sampling: "50%", subject: "lat.svc"}}, allow_trace: true}}
      {{service: "chunks", response: chunked}}
      {{service: "hdr", latency: {{sampling: headers, subject: "lat.hdr"}}}}
    ]
  }}
  B: {{
    users: [{{user: b, password: b}}]
    limits: {{max_conn: 1, max_subscriptions: 2, max_pay: 3, max_leafs: 4}}
    imports: [
      {{stream: {{account: A, subject: "pub.>"}}, prefix: "from_a"}}
      {{stream: {{account: A, subject: "priv.x"}}, to: "mine.x", allow_trace: true}}
      {{stream: {{account: A, subject: "pub.*.*"}}, to: "swap.$2.$1"}}
      {{service: {{account: A, subject: "svc.req"}}, to: "a.req", share: true}}
      {{service: {{account: A, subject: "svc.*"}}, to: "any.*"}}
    ]
  }}
}}
""",
    "no_auth_user of an account": "no_auth_user: a\n"
                                  "accounts { A: { users: [{user: a, password: a}] } }",
    "authorization and accounts": "authorization { users: [{user: g, password: g}] }\n"
                                  "accounts { A: { users: [{user: a, password: a}] } }",
    "jetstream off": "accounts { A: { jetstream: disabled }, B: { jetstream: false } }",
    # The reference drops an export of neither kind, takes any export subject (an invalid one
    # authorizes nothing), an import of the account's own export, and `share` on a stream.
    "what the reference lets pass": 'accounts { A: { exports: [{accounts: [A]}, '
                                    '{stream: "x..y"}, {stream: "a.>"}], imports: [{stream: '
                                    '{account: A, subject: "a.>"}, prefix: p, share: true}] } }',
}


def taken_by_both(tmp_path: Path, text: str) -> None:
    """A configuration file `-t` finds good on the reference and on tidings."""
    conf = tmp_path / "good.conf"
    conf.write_text(text + "\n")
    ref = reference("-t", "-c", str(conf))
    assert ref.returncode == 0, ref.stderr
    ours = tidings("-t", "-c", str(conf))
    assert ours.returncode == 0, ours.stderr


@pytest.mark.parametrize("text", GOOD.values(), ids=GOOD.keys())
def test_good_files_are_taken_by_both(tmp_path: Path, text: str) -> None:
    taken_by_both(tmp_path, text)


# (id, file, where the reference and tidings place the error, the message)
BAD = [
    ("reserved name in the array", 'accounts: [A, "$G"]', "1:15", '"$G" is a Reserved Account'),
    ("reserved name in the map", "port: 4222\naccounts {\n  $G: {}\n}", "3:3",
     '"$G" is a Reserved Account'),
    ("duplicate account", "accounts: [\n  A\n    B, A\n]", "3:8", "Duplicate Account Entry: A"),
    ("not a map", "accounts { A: 1 }", "1:11", "Expected map entries for accounts"),
    ("unknown key", "accounts { A: { foo: 1 } }", "1:16", 'unknown field "foo"'),
    ("bad account nkey", 'accounts { A: { nkey: "UABC" } }', "1:16",
     'Not a valid public nkey for an account: "UABC"'),
    ("user nkey as account nkey", f"accounts {{ A: {{ nkey: {USER_NKEY} }} }}", "1:16",
     f'Not a valid public nkey for an account: "{USER_NKEY}"'),
    ("duplicate user across accounts",
     "accounts {\n  A: { users: [{user: u, password: p}] }\n  B: { users: [{user: u, "
     "password: q}] }\n}", "3:8", 'Duplicate user "u" detected'),
    ("duplicate user in an account",
     "accounts { A: { users: [{user: u, password: p}, {user: u, password: q}] } }", "1:16",
     'Duplicate user "u" detected'),
    ("duplicate user of the authorization block",
     "authorization { users: [{user: u, password: p}] }\n"
     "accounts { A: { users: [{user: u, password: q}] } }", "2:17",
     'Duplicate user "u" detected'),
    ("duplicate user of an account read before the authorization block",
     "accounts { A: { users: [{user: u, password: q}] } }\n"
     "authorization { users: [{user: u, password: p}] }", "2:1", 'Duplicate user "u" detected'),
    ("duplicate user in the authorization block",
     "port: 4222\nauthorization {\n  users: [{user: u, password: p}, {user: u, password: q}]\n"
     "}", "2:1", 'Duplicate user "u" detected'),
    ("duplicate nkey across accounts",
     f"accounts {{\n  A: {{ users: [{{nkey: {USER_NKEY}}}] }}\n"
     f"  B: {{ users: [{{nkey: {USER_NKEY}}}] }}\n}}", "3:8",
     f'Duplicate nkey "{USER_NKEY}" detected'),
    ("single user and accounts",
     "authorization { user: x, password: y }\n"
     "accounts { A: { users: [{user: u, password: p}] } }", "2:17",
     "Can not have a single user/pass and accounts"),
    ("limits keys", "accounts { A: { limits: {max_conns: 1} } }", "1:25",
     'Unknown field "max_conns" parsing account limits'),
    ("export item not a map", "accounts {\n  A: {\n    exports: [\n      1\n    ]\n  }\n}",
     "4:7", "Export Items should be a map with type entry, got int64"),
    ("export with both", "accounts { A: { exports: [ {stream: a, service: b} ] } }", "1:39",
     'Detected service "b" but already saw a stream'),
    ("response on a stream", "accounts { A: { exports: [{stream: s, response_type: stream}] } }",
     "1:38", "Detected response directive on non-service"),
    ("response_type bad", "accounts { A: { exports: [ {service: a, response_type: foo} ] } }",
     "1:40", 'Unknown response type: "foo"'),
    ("response_threshold bad",
     'accounts { A: { exports: [ {service: a, response_threshold: "5x"} ] } }', "1:40",
     'Expected response threshold to be a parseable time duration, got "5x"'),
    ("response_threshold not a duration string",
     "accounts { A: { exports: [ {service: a, response_threshold: 5} ] } }", "1:40",
     "Expected response threshold to be a parseable time duration, got int64"),
    ("latency sampling out of range",
     "accounts { A: { exports: [ {service: a, latency: {sampling: 101, subject: lat}} ] } }",
     "1:50", "bad sampling percentage, should be 1-100"),
    ("latency without subject",
     "accounts { A: { exports: [ {service: a, latency: {sampling: 50}} ] } }", "1:40",
     "Latency subject required, but missing"),
    ("import item not a map", "accounts {\n  A: {\n    imports: [\n      1\n    ]\n  }\n}",
     "4:7", "Import Items should be a map with type entry, got int64"),
    ("import missing subject",
     "accounts { A: { exports: [{stream: a}] }, B: { imports: [ {stream: {account: A}} ] } }",
     "1:59", "Expect an account name and a subject"),
    ("import missing account",
     "accounts { A: { exports: [{service: a}] }, B: { imports: [ {service: {subject: a}} ] } }",
     "1:60", "Expect an account name and a subject"),
    ("unknown key of an import",
     "accounts { A: { imports: [ {stream: {account: A, subject: a, foo: 1}} ] } }", "1:61",
     'unknown field "foo"'),
    # The reference refuses it when it reads `to` after `stream` and `prefix` (most runs);
    # tidings always.
    ("prefix and to on a stream import",
     f'accounts {{ {EXPORTS}, B: {{ imports: [ {{stream: {{account: A, subject: "a.>"}}, '
     "prefix: p, to: t}] } }", "1:130", "Stream import can not have a 'prefix' and a 'to' "
     "property"),
    ("allow_trace on a service import",
     f'accounts {{ {EXPORTS}, B: {{ imports: [ {{service: {{account: A, subject: "s.x"}}, '
     "allow_trace: true} ] } }", "1:120", "Detected allow_trace directive on a non-stream"),
    ("duplicate service import",
     "accounts {\n  A: {\n    exports: [{service: a}]\n  }\n  B: {\n    imports: [\n"
     "      {service: {account: A, subject: a}}\n        {service: {account: A, subject: a}}\n"
     "    ]\n  }\n}", "8:44",
     'Duplicate service import subject "a", previously used in import for account "A", '
     'subject "a"'),
    # Once the block is read: at the `accounts` key.
    ("import of an unknown account",
     "port: 4222\n\n  accounts {\n  A: { imports: [{stream: {account: Z, subject: a}}] } }",
     "3:3", '"Z" account not defined for stream import'),
    ("service import of an unknown account",
     "accounts { A: { imports: [{service: {account: Z, subject: a}}] } }", "1:0",
     '"Z" account not defined for service import'),
    ("export to an unknown account",
     'accounts { A: { exports: [{service: "a.>", accounts: [Z]}] } }', "1:0",
     '"Z" account not defined for service export'),
    ("import not exported", "accounts { A: {}, B: { imports: [{stream: {account: A, "
     "subject: a}}] } }", "1:0", 'Error adding stream import "a": stream import not authorized'),
    ("import of an export to others",
     'accounts { A: { exports: [{stream: "a.>", accounts: [C]}] }, B: { imports: [{stream: '
     '{account: A, subject: "a.>"}}] }, C: {} }', "1:0",
     'Error adding stream import "a.>": stream import not authorized'),
    ("bad import subject",
     'accounts { A: { exports: [{stream: ">"}] }, B: { imports: [{stream: {account: A, '
     'subject: "a..b"}}] } }', "1:0",
     'Error adding stream import "a..b": stream import not authorized'),
    ("bad service import subject",
     f'accounts {{ {EXPORTS}, B: {{ imports: [ {{service: {{account: A, subject: "s.x"}}, '
     'to: "a..b"} ] } }', "1:0",
     'Error adding service import "s.x": sublist: invalid subject'),
    ("service not exported",
     f'accounts {{ {EXPORTS}, B: {{ imports: [ {{service: {{account: A, subject: "t.x"}}}} ] '
     "} }", "1:0", 'Error adding service import "t.x": service import not authorized'),
    ("wildcard prefix",
     f'accounts {{ {EXPORTS}, B: {{ imports: [ {{stream: {{account: A, subject: "a.>"}}, '
     'prefix: "p.*"} ] } }', "1:0",
     'Error adding stream import "a.>": stream import prefix can not contain wildcard tokens'),
    ("import mapping not using all wildcards",
     'accounts { A: { exports: [{stream: "a.*.*"}] }, B: { imports: [ {stream: {account: A, '
     'subject: "a.*.*"}, to: "b.$1"} ] } }', "1:0",
     'Error adding stream import "a.*.*": failed to create mapping transform for stream import '
     'subject from "a.*.*" to "b.$1": invalid mapping destination: not using all of the token '
     "wildcard(s) in b.$1"),
    ("import mapping with another function",
     'accounts { A: { exports: [{stream: "a.*"}] }, B: { imports: [ {stream: {account: A, '
     'subject: "a.*"}, to: "b.{{partition(3,1)}}"} ] } }', "1:0",
     'Error adding stream import "a.*": failed to create mapping transform for stream import '
     'subject from "a.*" to "b.{{partition(3,1)}}": invalid mapping destination: the only '
     "mapping function allowed for import transforms is {{Wildcard()}} in {{partition(3,1)}}"),
    ("service import mapping",
     'accounts { A: { exports: [{service: "s.*.*"}] }, B: { imports: [ {service: {account: A, '
     'subject: "s.*.*"}, to: "my.$1"} ] } }', "1:0",
     'Error adding service import "s.*.*": failed to create mapping transform for service '
     'import subject from "my.$1" to "s.*.*": invalid mapping destination: not using all of '
     "the token wildcard(s) in my.$1"),
    ("stream import twice",
     f'accounts {{ {EXPORTS}, B: {{ imports: [ {{stream: {{account: A, subject: "a.>"}}}}, '
     '{stream: {account: A, subject: "a.>"}, to: "x.>"} ] } }', "1:0",
     'Error adding stream import "a.>": stream import already exists'),
    ("stream import cycle",
     'accounts { A: { exports: [{stream: "a.>"}], imports: [{stream: {account: B, subject: '
     '"b.>"}, to: "a.>"}] }, B: { exports: [{stream: "b.>"}], imports: [{stream: {account: A, '
     'subject: "a.>"}, to: "b.>"}] } }', "1:0",
     'Error adding stream import "a.>": import forms a cycle'),
    ("service import cycle",
     'accounts { A: { exports: [{service: "a"}], imports: [{service: {account: B, subject: '
     '"b"}, to: "a"}] }, B: { exports: [{service: "b"}], imports: [{service: {account: A, '
     'subject: "a"}, to: "b"}] } }', "1:0",
     'Error adding service import "a": import forms a cycle'),
    ("latency on a streamed service",
     'accounts { A: { exports: [{service: "s", latency: "lat", response_type: stream}] } }',
     "1:0", 'Error adding service latency sampling for "s" on subject "lat": bad service '
     "response type"),
    ("latency into the service",
     'accounts { A: { exports: [{service: "s", latency: "s"}] } }', "1:0",
     'Error adding service latency sampling for "s" on subject "s": invalid publish subject'),
    ("system_account not a string", "port: 4222\nsystem_account: 1", "2:1",
     "system account name must be a string"),
]


@pytest.mark.parametrize(("text", "where", "message"), [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])
def test_bad_files_are_refused_by_both_alike(tmp_path: Path, text: str, where: str,
                                             message: str) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text(text + "\n")
    line = f"{conf}:{where}: {message}"
    assert reference_says(conf, line, "-t"), reference("-t", "-c", str(conf)).stderr
    ours = tidings("-t", "-c", str(conf))
    assert ours.returncode == 1 and ours.stderr.strip().endswith(line), ours.stderr
    assert "Traceback" not in ours.stderr


START = [
    ("system_account unknown", "system_account: NOPE\naccounts { A: {} }",
     "error resolving system account: account missing"),
    ("system_account $SYS undefined", 'system_account: "$SYS"',
     "error resolving system account: account missing"),
    ("no_auth_user unknown", "no_auth_user: b\naccounts { A: { users: [{user: a, password: a}]"
     " } }", 'no_auth_user: "b" not present as user or nkey in authorization block or account '
     "configuration"),
    ("no_auth_user without users", "no_auth_user: b\naccounts: [A]",
     'no_auth_user: "b" present, but users/nkeys are not defined'),
]


@pytest.mark.parametrize(("text", "message"), [s[1:] for s in START], ids=[s[0] for s in START])
def test_what_the_reference_checks_at_start_tidings_checks_under_t(tmp_path: Path, text: str,
                                                                  message: str) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("listen: 127.0.0.1:-1\n" + text + "\n")
    assert reference("-t", "-c", str(conf)).returncode == 0
    started = reference("-c", str(conf))  # ends at once, before it listens
    assert started.returncode == 1 and message in started.stderr
    ours = tidings("-t", "-c", str(conf))
    assert ours.returncode == 1 and ours.stderr.strip().endswith(message), ours.stderr


NOT_YET = [
    ("accounts { A: { msg_trace: { dest: t } } }", '1:16: "msg_trace": an account\'s message '
     "trace destination is not supported by tidings yet"),
    ('accounts { A: { exports: [{stream: "a.*", account_token_position: 2}] } }',
     '1:42: "account_token_position": exports authorized by a token of the subject are not '
     "supported by tidings yet"),
]


@pytest.mark.parametrize(("text", "message"), NOT_YET)
def test_what_tidings_does_not_build_yet_is_refused_by_name(tmp_path: Path, text: str,
                                                            message: str) -> None:
    conf = tmp_path / "f.conf"
    conf.write_text(text + "\n")
    assert reference("-t", "-c", str(conf)).returncode == 0
    ours = tidings("-t", "-c", str(conf))
    assert ours.returncode == 1 and ours.stderr.strip().endswith(f"{conf}:{message}")
