"""The `accounts { }` block and `system_account` read into typed options
(tidings.config.accounts): what each form and key gives, the users of accounts among the
server's users, and errors placed at `file:line:col`. The same files against the reference
are tests/integration/config/test_accounts_config.py's."""

from __future__ import annotations

import nkeys
import pytest

from tidings.config import Array, ConfigError, parse
from tidings.config.accounts import (
    LATENCY_HEADERS,
    AccountConfig,
    AccountLimits,
    Latency,
    MapDest,
    Mapping,
    ServiceExport,
    ServiceImport,
    StreamExport,
    StreamImport,
    check_system_account,
    go_duration,
)
from tidings.config.auth import Permissions, SubjectPermission, User, check_no_auth_user
from tidings.config.server import ServerOptions, apply_server_config, check

# Fixed keys: the test ids name them, and every pytest-xdist worker must collect the same.
ACCOUNT_NKEY = nkeys.from_seed(nkeys.encode_seed(bytes(range(32)), nkeys.PREFIX_BYTE_ACCOUNT)
                               ).public_key.decode()
USER_NKEY = nkeys.from_seed(nkeys.encode_seed(bytes(range(32)), nkeys.PREFIX_BYTE_USER)
                            ).public_key.decode()


def options(text: str) -> ServerOptions:
    return apply_server_config(ServerOptions(), parse(text, "f.conf"))


def error(text: str) -> str:
    with pytest.raises(ConfigError) as exc:
        options(text)
    return str(exc.value)


def test_an_array_of_names() -> None:
    auth = options("accounts: [A, B]\n").auth
    assert auth.accounts == {"A": AccountConfig("A"), "B": AccountConfig("B")}
    assert auth.users == []


def test_a_map_of_accounts_in_file_order() -> None:
    text = f"""
accounts {{
  B: {{
    nkey: {ACCOUNT_NKEY}
    limits: {{max_conn: 10, max_subscriptions: 20, max_payload: 1KB, max_leafs: 2}}
    exports: [
      {{stream: "pub.>"}}
      {{stream: "priv.>", accounts: [A]}}
      {{service: "svc.>", response_type: singleton, response_threshold: "1m30s",
        latency: {{sampling: "50%", subject: "lat.svc"}}, allow_trace: true}}
      {{service: "plain", response_type: chunked}}
      {{service: "hdr", latency: {{sampling: headers, subject: "lat.hdr"}}}}
      {{service: "all", latency: "lat.all"}}
    ]
  }}
  A: {{
    imports: [
      {{stream: {{account: B, subject: "pub.>"}}, prefix: "from_b"}}
      {{stream: {{account: B, subject: "priv.x"}}, to: "mine.x", allow_trace: true}}
      {{stream: {{account: B, subject: "pub.y"}}, prefix: "p."}}
      {{service: {{account: B, subject: "svc.a"}}, to: "my.a", share: true}}
      {{service: {{account: B, subject: "plain"}}}}
    ]
  }}
}}
"""
    accounts = options(text).auth.accounts
    assert list(accounts) == ["B", "A"]
    b, a = accounts["B"], accounts["A"]
    assert b.nkey == ACCOUNT_NKEY
    assert b.limits == AccountLimits(10, 20, 1024, 2)
    assert b.exports == [
        StreamExport("pub.>"),
        StreamExport("priv.>", ("A",)),
        ServiceExport("svc.>", (), "Singleton", 90.0, Latency(50, "lat.svc"), True),
        ServiceExport("plain", response_type="Chunked"),
        ServiceExport("hdr", latency=Latency(LATENCY_HEADERS, "lat.hdr")),
        ServiceExport("all", latency=Latency(100, "lat.all")),
    ]
    assert ServiceExport("x").response_threshold == 120.0
    assert a.imports == [
        StreamImport("B", "pub.>", "from_b.pub.>", "from_b"),
        StreamImport("B", "priv.x", "mine.x", allow_trace=True),
        StreamImport("B", "pub.y", "p.pub.y", "p."),
        ServiceImport("B", "svc.a", "my.a", share=True),
        ServiceImport("B", "plain"),
    ]
    assert a.limits == AccountLimits()


def test_users_of_accounts_join_the_users_with_their_account_and_its_defaults() -> None:
    text = f"""
authorization {{
  default_permissions: {{publish: "g.>"}}
  users: [{{user: g, password: g}}]
}}
accounts {{
  A: {{
    default_permissions: {{publish: "a.>"}}
    users: [
      {{user: a1, password: p}}
      {{user: a2, password: p, permissions: {{subscribe: "own.>"}}}}
      {{nkey: {USER_NKEY}}}
    ]
  }}
  B: {{users: [{{user: b, password: p}}]}}
}}
no_auth_user: a1
"""
    opts = options(text)
    auth = opts.auth
    a_default = Permissions(publish=SubjectPermission(("a.>",)))
    assert auth.accounts["A"].default_permissions == a_default
    assert auth.users == [
        User("g", "g"),
        User("a1", "p", permissions=a_default, account="A"),
        User("a2", "p", permissions=Permissions(subscribe=SubjectPermission(("own.>",))),
             account="A"),
        User(nkey=USER_NKEY, permissions=a_default, account="A"),
        User("b", "p", account="B"),
    ]
    check(opts)  # no_auth_user a1 is a user of account A


def test_variables_in_the_block_are_not_accounts() -> None:
    auth = options("accounts {\n  PW = secret\n  A: {users: [{user: a, password: $PW}]}\n}\n"
                   ).auth
    assert list(auth.accounts) == ["A"]
    assert auth.users == [User("a", "secret", account="A")]


def test_system_account() -> None:
    auth = options("system_account: A\naccounts: [A]\n").auth
    assert auth.system_account == "A"
    check_system_account(auth)
    assert options("SYS_NAME: X\nsystem: $SYS_NAME\n").auth.system_account == "X"
    for good in ("system_account: A\naccounts: [A]\n", 'system_account: "$G"\n'):
        check(options(good))
    for bad in ("system_account: B\naccounts: [A]\n", 'system_account: "$SYS"\n'):
        with pytest.raises(ValueError, match="^error resolving system account: account "
                                             "missing$"):
            check(options(bad))
    assert error("port: 1\nsystem_account: 1\n") == (
        "f.conf:2:1: system account name must be a string")


def test_no_auth_user_must_be_a_user_of_some_account_or_the_block() -> None:
    auth = options("no_auth_user: x\naccounts { A: {users: [{user: a, password: p}]} }\n").auth
    with pytest.raises(ValueError, match='no_auth_user: "x" not present as user or nkey'):
        check_no_auth_user(auth)


def test_jetstream_on_and_off_and_its_limits() -> None:
    for off in ("disabled", "false", "disable"):
        assert not options(f"accounts {{ A: {{ jetstream: {off} }} }}\n").auth.accounts[
            "A"].jetstream
    for on in ("enabled", "true", "enable"):
        assert options(f"accounts {{ A: {{ jetstream: {on} }} }}\n").auth.accounts["A"].jetstream
    account = options("accounts { A: { jetstream: {max_mem: 1G, max_file: 2G, streams: 3, "
                      "consumers: 4, max_ack_pending: 5, mem_max_stream_bytes: 6, "
                      "store_max_stream_bytes: 7, max_bytes: true} } }\n").auth.accounts["A"]
    assert account.jetstream
    assert account.jetstream_limits.as_json() == {
        "max_memory": 10**9, "max_storage": 2 * 10**9, "max_streams": 3, "max_consumers": 4,
        "max_ack_pending": 5, "memory_max_stream_bytes": 6, "storage_max_stream_bytes": 7,
        "max_bytes_required": True}
    assert error("accounts { A: { jetstream: {max_mem: x} } }\n").endswith(
        'Expected a parseable size for "max_mem", got x')


@pytest.mark.parametrize(("text", "message"), [
    ("accounts { A: { msg_trace: {dest: x} } }", '1:16: "msg_trace": an account\'s message '
     "trace destination is not supported by tidings yet"),
    ('accounts { A: { exports: [{stream: "a.*", account_token_position: 2}] } }',
     '1:42: "account_token_position": exports authorized by a token of the subject are not '
     "supported by tidings yet"),
    ("no_system_account: true", '1:0: "no_system_account": turning the system account off '
     "is not supported"),
])
def test_what_tidings_does_not_build_is_refused_by_name(text: str, message: str) -> None:
    assert error(text + "\n").startswith("f.conf:" + message)


ERRORS = [
    # Positions as the reference's: a key, an element of an array (a map: just past its `}`),
    # or the `accounts` key for the checks once the block is read.
    ('port: 1\naccounts: [A, "$G"]\n', '2:16: "$G" is a Reserved Account'),
    ("accounts {\n  $G: {}\n}\n", '2:3: "$G" is a Reserved Account'),
    ("accounts: [\n  A\n    B, A\n]\n", "3:8: Duplicate Account Entry: A"),
    ("accounts { A: 1 }\n", "1:11: Expected map entries for accounts"),
    ('accounts { A: { nkey: "UABC" } }\n', '1:16: Not a valid public nkey for an account: '
     '"UABC"'),
    (f"accounts {{ A: {{ nkey: {USER_NKEY} }} }}\n", "1:16: Not a valid public nkey for an "
     f'account: "{USER_NKEY}"'),
    ("accounts { A: { foo: 1 } }\n", '1:16: unknown field "foo"'),
    ("accounts { A: {users: [{user: u, password: p}]},\n  B: {users: [{user: u, password: q}]}"
     " }\n", '2:7: Duplicate user "u" detected'),
    ("authorization { users: [{user: u, password: p}] }\naccounts { A: { users: [{user: u, "
     "password: q}] } }\n", '2:17: Duplicate user "u" detected'),
    ("accounts { A: { users: [{user: u, password: q}] } }\nauthorization { users: [{user: u, "
     "password: p}] }\n", '2:1: Duplicate user "u" detected'),
    ("authorization { user: x, password: y }\naccounts { A: { users: [{user: u, password: q}]"
     " } }\n", "2:17: Can not have a single user/pass and accounts"),
    ("authorization { token: t }\naccounts { A: { users: [{user: u, password: q}] } }\n",
     "2:17: Can not have a token and accounts"),
    ("accounts { A: { users: [{user: u, password: q}] } }\nauthorization { token: t }\n",
     "2:17: Can not have a token and a users array"),
    ("accounts { A: { limits: {max_conns: 1} } }\n",
     '1:25: Unknown field "max_conns" parsing account limits'),
    ("accounts {\n  A: {\n    exports: [\n      1\n    ]\n  }\n}\n",
     "4:7: Export Items should be a map with type entry, got int64"),
    ("accounts { A: { exports: [{stream: a, service: b}] } }\n",
     '1:38: Detected service "b" but already saw a stream'),
    ("accounts { A: { exports: [{response_type: stream, stream: a}] } }\n",
     "1:27: Detected response directive on non-service"),
    ("accounts { A: { exports: [{service: a, response_type: foo}] } }\n",
     '1:39: Unknown response type: "foo"'),
    ("accounts { A: { exports: [{service: a, response_threshold: 5}] } }\n",
     "1:39: Expected response threshold to be a parseable time duration, got int64"),
    ("accounts { A: { exports: [{service: a, latency: {sampling: 0, subject: l}}] } }\n",
     "1:49: bad sampling percentage, should be 1-100"),
    ("accounts { A: { exports: [{service: a, latency: {sampling: 5}}] } }\n",
     "1:39: Latency subject required, but missing"),
    ("accounts { A: { imports: [{stream: {account: B}}] } }\n",
     "1:27: Expect an account name and a subject"),
    ("accounts { A: { imports: [{stream: {account: B, subject: a}, prefix: p, to: t}] } }\n",
     "1:72: Stream import can not have a 'prefix' and a 'to' property"),
    ("accounts { A: { imports: [{stream: {account: B, subject: a}, to: t, prefix: p}] } }\n",
     "1:61: Stream import can not have a 'prefix' and a 'to' property"),
    ("accounts { A: { imports: [{allow_trace: true, service: {account: B, subject: a}}] } }\n",
     "1:27: Detected allow_trace directive on a non-stream"),
    ("accounts {\n  A: {\n    exports: [{service: a}]\n  }\n  B: {\n    imports: [\n"
     "      {service: {account: A, subject: a}}\n      {service: {account: A, subject: a}}\n"
     "    ]\n  }\n}\n", '8:42: Duplicate service import subject "a", previously used in '
     'import for account "A", subject "a"'),
    # Once the block is read: at the `accounts` key.
    ("port: 1\n  accounts {\n  A: { imports: [{stream: {account: Z, subject: a}}] } }\n",
     '2:3: "Z" account not defined for stream import'),
    ("accounts { A: { imports: [{service: {account: Z, subject: a}}] } }\n",
     '1:0: "Z" account not defined for service import'),
    ("accounts { A: { exports: [{stream: a, accounts: [Z]}] } }\n",
     '1:0: "Z" account not defined for stream export'),
    ("accounts { A: {}, B: { imports: [{stream: {account: A, subject: a}}] } }\n",
     '1:0: Error adding stream import "a": stream import not authorized'),
    ('accounts { A: { exports: [{stream: "a.>", accounts: [C]}] }, B: { imports: [{stream: '
     '{account: A, subject: "a.b"}}] }, C: {} }\n',
     '1:0: Error adding stream import "a.b": stream import not authorized'),
    ('accounts { A: { exports: [{service: "s.*"}] }, B: { imports: [{service: {account: A, '
     'subject: "s.x.y"}}] } }\n',
     '1:0: Error adding service import "s.x.y": service import not authorized'),
    ('accounts { A: { exports: [{service: ">"}] }, B: { imports: [{service: {account: A, '
     'subject: "s..x"}}] } }\n', '1:0: Error adding service import "s..x": sublist: invalid '
     'subject'),
    ('accounts { A: { exports: [{stream: ">"}] }, B: { imports: [{stream: {account: A, '
     'subject: ">"}, prefix: "p.*"}] } }\n', '1:0: Error adding stream import ">": stream '
     "import prefix can not contain wildcard tokens"),
    ('accounts { A: { exports: [{stream: "a.*.*"}] }, B: { imports: [{stream: {account: A, '
     'subject: "a.*.*"}, to: "b.$1"}] } }\n', '1:0: Error adding stream import "a.*.*": failed '
     'to create mapping transform for stream import subject from "a.*.*" to "b.$1": invalid '
     "mapping destination: not using all of the token wildcard(s) in b.$1"),
    ('accounts { A: { exports: [{stream: ">"}] }, B: { imports: [{stream: {account: A, '
     'subject: "a"}}, {stream: {account: A, subject: "a"}}] } }\n',
     '1:0: Error adding stream import "a": stream import already exists'),
    ('accounts { A: { exports: [{stream: "a.>"}], imports: [{stream: {account: B, subject: '
     '"b.>"}, to: "a.>"}] }, B: { exports: [{stream: "b.>"}], imports: [{stream: {account: A, '
     'subject: "a.>"}, to: "b.>"}] } }\n',
     '1:0: Error adding stream import "a.>": import forms a cycle'),
    ('accounts { A: { exports: [{service: "s", latency: "lat", response_type: stream}] } }\n',
     '1:0: Error adding service latency sampling for "s" on subject "lat": bad service '
     "response type"),
    ('accounts { A: { exports: [{service: "s.>", latency: "s.lat"}] } }\n',
     '1:0: Error adding service latency sampling for "s.>" on subject "s.lat": invalid '
     "publish subject"),
]


@pytest.mark.parametrize(("text", "message"), ERRORS)
def test_errors_as_the_reference_says_them(text: str, message: str) -> None:
    assert error(text) == "f.conf:" + message


def test_what_the_reference_takes_is_taken() -> None:
    accounts = options(
        # An export of neither kind is dropped; an export's subject is not checked; an
        # import of the own account's export; `share` on a stream import is ignored.
        'accounts { A: { exports: [{accounts: [A]}, {stream: "x..y"}, {stream: "a.>"}], '
        'imports: [{stream: {account: A, subject: "a.>"}, prefix: p, share: true}] } }\n'
    ).auth.accounts
    assert accounts["A"].exports == [StreamExport("x..y"), StreamExport("a.>")]
    assert accounts["A"].imports == [StreamImport("A", "a.>", "p.a.>", "p")]


def test_mappings_of_imports() -> None:
    accounts = options(
        'accounts { A: { exports: [{stream: "a.*.*"}, {service: "s.*"}] }, B: { imports: ['
        '{stream: {account: A, subject: "a.*.*"}, to: "b.$2.{{wildcard(1)}}"}, '
        '{service: {account: A, subject: "s.*"}, to: "my.*"}] } }\n').auth.accounts
    assert accounts["B"].imports == [StreamImport("A", "a.*.*", "b.$2.{{wildcard(1)}}"),
                                     ServiceImport("A", "s.*", "my.*")]


def test_mappings_of_an_account_and_of_the_top_level() -> None:
    conf = options('mappings { a: b, "w.*": [{destination: "x.$1", weight: 40%}, '
                   '{dest: "y", weight: 60, cluster: c}] }\n'
                   'accounts { A: { maps: { "p.*": "{{partition(3,1)}}" } } }\n')
    assert conf.mappings == (
        Mapping("a", (MapDest("b"),)),
        Mapping("w.*", (MapDest("x.$1", 40), MapDest("y", 60, "c"))))
    assert conf.auth.accounts["A"].mappings == (Mapping("p.*", (MapDest("{{partition(3,1)}}"),)),)


def test_arrays_remember_where_their_values_were_written() -> None:
    conf = parse('v: 2\na: [x, "y",\n  {k: 1}\n  [z]\n  $v\n]\n', "f.conf")
    array = conf["a"]
    assert isinstance(array, Array) and array == ["x", "y", {"k": 1}, ["z"], 2]
    assert [array.where(i) for i in range(5)] == [
        "f.conf:2:5", "f.conf:2:9", "f.conf:3:9", "f.conf:4:6", "f.conf:5:4"]


def test_go_durations() -> None:
    assert go_duration("1m30s") == 90.0
    assert go_duration("0") == 0.0
    assert go_duration("1.5h") == 5400.0
    assert go_duration("500ms") == 0.5
    for bad in ("5", "2d", "1x", "", "m"):
        assert go_duration(bad) is None
