"""The `accounts { }` block of the configuration file, and `system_account`, read into
typed options (AccountConfig, kept in AuthOptions.accounts) with the reference's keys,
checks and error messages (nats-server opts.go: parseAccounts, parseAccount, the exports and
imports, parseAccountLimits; accounts.go: what adding each export and import checks).

Both forms: an array of names (`accounts: [A, B]`) and a map of accounts, each with `nkey`,
`users` (which go into AuthOptions.users with their account, the account's
default_permissions applied to those that have none, unique with the authorization block's
users and every other account's), `default_permissions`, `limits`, `exports` and `imports`.
`$G` (the global account) is reserved; `$SYS` is an account like another.

After all accounts are read, as the reference does once the block is parsed: the accounts
an export names and an import comes from must be defined; an import must be authorized by
an export of that account (public, or naming the importer; the import's subject within the
export's); a stream import's prefix is literal; subjects and mappings (`to` with wildcards)
are valid; an import forms no cycle; latency tracking goes to a valid publish subject, on a
singleton service. These errors are placed at the `accounts` key, as the reference places
them. `system_account` must be `$G` or an account of the block, and `no_auth_user` may be a
user of an account (auth.py's check_no_auth_user); the reference checks those at start, not
under `-t` (tidings checks them under `-t` too).

Where the reference's result depends on Go's random map order (which key of an import map
it reads first), tidings reads keys in file order, with one exception: a stream import with
both `prefix` and `to` is always refused (the reference refuses it when it reads `to`
last, and otherwise ignores `to`). An export with neither `stream` nor `service` is
ignored, as the reference ignores it; an export's subject is not checked (the reference
takes any string there; an invalid one authorizes no import). Where the reference fails a
Go type assertion (a string where a boolean is expected, ...), tidings says what it
expected instead of Go's panic text.

An account's `mappings` (`maps`), and the top-level ones of the global account
(config/server.py), are read by `parse_mappings` with the reference's checks and words
(opts.go's parseAccountMappings, accounts.go's AddWeightedMappings, the destination's
transform: protocol/transform.py), in file order, the first error refusing the file. One
difference: an empty destination (`a: ""`, or a weighted entry without one) is refused,
where the reference takes it and then fails on the first message mapped to it.

Keys the reference takes and tidings does not build yet are refused by name: `msg_trace`
(`trace_dest`) in an account, `account_token_position` in an export, and `jetstream` limits
in an account (on and off are taken: `enabled`, `disabled`), which are ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..protocol.subjects import is_valid_subject
from . import units
from .auth import (
    AuthOptions,
    Permissions,
    identities,
    parse_permissions,
    parse_users,
    public_nkey_bytes,
)
from .parser import Array, ConfigError, Section

GLOBAL_ACCOUNT = "$G"
SYSTEM_ACCOUNT = "$SYS"
# As the reference's DEFAULT_SERVICE_EXPORT_RESPONSE_THRESHOLD and
# DEFAULT_SERVICE_LATENCY_SAMPLING.
RESPONSE_THRESHOLD = 120.0
LATENCY_SAMPLING = 100
LATENCY_HEADERS = -1  # `sampling: headers`: measured when the request's headers ask for it
_RESPONSE_TYPES = {"single": "Singleton", "singleton": "Singleton", "stream": "Streamed",
                   "chunk": "Chunked", "chunked": "Chunked"}
_NOT_YET = "not supported by tidings yet"


@dataclass(frozen=True)
class Latency:
    """A service export's `latency`: measure `sampling` percent of the requests (1..100, or
    LATENCY_HEADERS: those whose headers ask for it, the reference's `sampling: headers`)
    and publish the results to `subject` in the exporting account."""

    sampling: int
    subject: str


@dataclass(frozen=True)
class StreamExport:
    subject: str
    accounts: tuple[str, ...] = ()  # the accounts that may import it; empty: public


@dataclass(frozen=True)
class ServiceExport:
    subject: str
    accounts: tuple[str, ...] = ()  # empty: public
    response_type: str = "Singleton"  # "Singleton" | "Streamed" | "Chunked" (the reference's)
    response_threshold: float = RESPONSE_THRESHOLD  # seconds
    latency: Latency | None = None
    allow_trace: bool = False


@dataclass(frozen=True)
class StreamImport:
    account: str  # the exporting account
    subject: str  # in the exporting account
    # The subject in the importing account: `to` as written, or with a `prefix`, the prefix,
    # a "." unless it ends with one, and the subject (the reference's addStreamImport:
    # prefix "p" and subject "a.>" give "p.a.>"); "": the same as `subject`.
    to: str = ""
    prefix: str = ""  # as written
    allow_trace: bool = False


@dataclass(frozen=True)
class ServiceImport:
    account: str  # the exporting account
    subject: str  # in the exporting account
    to: str = ""  # the local subject ("": the same as `subject`)
    share: bool = False
    allow_trace: bool = False  # (never from a file: the reference refuses it on a service)


@dataclass(frozen=True)
class AccountLimits:
    """An account's `limits { }`; -1: unlimited."""

    max_connections: int = -1
    max_subscriptions: int = -1
    max_payload: int = -1
    max_leafnodes: int = -1


@dataclass(frozen=True)
class JetStreamLimits:
    """An account's JetStream limits (-1: none), as its `jetstream { }` map sets them."""

    max_memory: int = -1
    max_storage: int = -1
    max_streams: int = -1
    max_consumers: int = -1
    max_ack_pending: int = -1
    memory_max_stream_bytes: int = -1
    storage_max_stream_bytes: int = -1
    max_bytes_required: bool = False
    tier: str = ""  # the tier of an operator's tiered limits ("R1"), "" if not tiered

    def as_json(self) -> dict[str, Any]:
        """The `limits` of an account info response."""
        return {"max_memory": self.max_memory, "max_storage": self.max_storage,
                "max_streams": self.max_streams, "max_consumers": self.max_consumers,
                "max_ack_pending": self.max_ack_pending,
                "memory_max_stream_bytes": self.memory_max_stream_bytes,
                "storage_max_stream_bytes": self.storage_max_stream_bytes,
                "max_bytes_required": self.max_bytes_required}


_JS_LIMIT_KEYS = {
    "max_memory": "max_memory", "max_mem": "max_memory", "mem": "max_memory",
    "memory": "max_memory", "max_store": "max_storage", "max_file": "max_storage",
    "max_disk": "max_storage", "store": "max_storage", "disk": "max_storage",
    "max_streams": "max_streams", "streams": "max_streams",
    "max_consumers": "max_consumers", "consumers": "max_consumers",
    "mem_max_stream_bytes": "memory_max_stream_bytes",
    "memory_max_stream_bytes": "memory_max_stream_bytes",
    "disk_max_stream_bytes": "storage_max_stream_bytes",
    "store_max_stream_bytes": "storage_max_stream_bytes",
    "max_ack_pending": "max_ack_pending",
}
_JS_REQUIRED_KEYS = ("max_bytes_required", "max_stream_bytes", "max_bytes")


@dataclass(frozen=True)
class MapDest:
    """One destination of a subject mapping: the subject (a transform of the source), the
    percentage of messages it takes, and the cluster it is for ("": any)."""

    subject: str
    weight: int = 100
    cluster: str = ""


@dataclass(frozen=True)
class Mapping:
    """A subject mapping: what a client publishes to `source` goes to one of the
    destinations, by weight (what they leave of 100% keeps its subject)."""

    source: str
    destinations: tuple[MapDest, ...]


@dataclass
class AccountConfig:
    name: str
    nkey: str = ""
    exports: list[StreamExport | ServiceExport] = field(default_factory=list)
    imports: list[StreamImport | ServiceImport] = field(default_factory=list)
    limits: AccountLimits = AccountLimits()
    default_permissions: Permissions | None = None
    jetstream: bool = False  # `jetstream: enabled`, or a map of limits
    jetstream_limits: JetStreamLimits = field(default_factory=lambda: JetStreamLimits())
    mappings: tuple[Mapping, ...] = ()


# -- errors --------------------------------------------------------------------------------
def _at(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}")


def _key(section: Any, key: str) -> str:
    return section.where(key) if isinstance(section, Section) else "?"


def _item(array: Any, index: int) -> str:
    return array.where(index) if isinstance(array, Array) else "?"


def _q(text: Any) -> str:
    """A value as Go's %q shows a string."""
    return json.dumps(text, ensure_ascii=False) if isinstance(text, str) else str(text)


def _go_type(value: Any) -> str:
    """The reference's name (Go's %T) for the type of a value of the file."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "map[string]interface {}"
    if isinstance(value, list):
        return "[]interface {}"
    return "time.Time"


def _go_value(value: Any) -> str:
    """A value as Go's %v shows it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_value(v)}" for k, v in sorted(value.items())) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_value(v) for v in value) + "]"
    return str(value)


def _string(section: Any, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _at(_key(section, key), f'"{key}": expected a string, got {_go_type(value)}')
    return value


def _bool(section: Any, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _at(_key(section, key), f'"{key}": expected a boolean, got {_go_type(value)}')
    return value


def _int(section: Any, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _at(_key(section, key), f'"{key}": expected an integer, got {_go_type(value)}')
    return value


def _entries(section: Section) -> Iterator[tuple[str, str, Any]]:
    """(key, key in lower case, value) of a map."""
    for key, value in section.items():
        yield key, key.lower(), value


def _unknown(section: Section, key: str, message: str = "") -> None:
    """A key no case took: refused (with the reference's `unknown field` or `message`),
    unless it served as a variable, as the reference allows."""
    if key not in section.variables:
        raise _at(section.where(key), message or f'unknown field "{key}"')


def _not_yet(section: Any, key: str, what: str) -> ConfigError:
    return _at(_key(section, key), f'"{key}": {what} {_NOT_YET}')


# -- the block -----------------------------------------------------------------------------
def parse_accounts(conf: Section, key: str, changes: dict[str, Any], auth: AuthOptions) -> None:
    """`accounts` (the top-level key `key` of `conf`) into auth.accounts, their users into
    auth.users; `changes` holds the authorization block's single user or token, if read."""
    value = conf[key]
    if isinstance(value, list):
        accounts = _named_accounts(value)
    elif isinstance(value, dict):
        accounts = {}
        for name, entry in value.items():
            if name not in value.variables:  # one that served as a variable is no account
                accounts[name] = _account(value, name, entry, changes, auth)
    else:
        raise _at(conf.where(key), f'"{key}": expected an array of names or a map of accounts, '
                  f"got {_go_type(value)}")
    auth.accounts = accounts
    _resolve(accounts, conf.where(key))


def _named_accounts(names: list[Any]) -> dict[str, AccountConfig]:
    accounts: dict[str, AccountConfig] = {}
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise _at(_item(names, i), f"expected an account name, got {_go_type(name)}")
        if name == GLOBAL_ACCOUNT:
            raise _at(_item(names, i), f"{_q(name)} is a Reserved Account")
        if name in accounts:
            raise _at(_item(names, i), f"Duplicate Account Entry: {name}")
        accounts[name] = AccountConfig(name)
    return accounts


def _account(block: Section, name: str, value: Any, changes: dict[str, Any],
             auth: AuthOptions) -> AccountConfig:
    where = block.where(name)
    if not isinstance(value, dict):
        raise _at(where, "Expected map entries for accounts")
    if name == GLOBAL_ACCOUNT:
        raise _at(where, f"{_q(name)} is a Reserved Account")
    account = AccountConfig(name)
    users_key, users = "", None
    for key, lower, item in _entries(value):
        if lower == "nkey":
            if not isinstance(item, str) or public_nkey_bytes(item, "A") is None:
                raise _at(value.where(key), f"Not a valid public nkey for an account: {_q(item)}")
            account.nkey = item
        elif lower == "imports":
            account.imports = _imports(value, key, item)
        elif lower == "exports":
            account.exports = _exports(value, key, item)
        elif lower == "jetstream":
            limits = _jetstream(value, key, item)
            account.jetstream = limits is not None
            account.jetstream_limits = limits or JetStreamLimits()
        elif lower == "users":
            users_key, users = key, parse_users(value, key, item, set())
        elif lower == "default_permissions":
            account.default_permissions = parse_permissions(value, key, item)
        elif lower == "limits":
            account.limits = _limits(value, key, item)
        elif lower in ("mappings", "maps"):
            account.mappings = parse_mappings(value, key, item)
        elif lower in ("msg_trace", "trace_dest"):
            raise _not_yet(value, key, "an account's message trace destination is")
        else:
            _unknown(value, key)
    if users:
        _add_users(value, users_key, users, account, changes, auth)
    return account


def _add_users(block: Section, key: str, users: list[Any], account: AccountConfig,
               changes: dict[str, Any], auth: AuthOptions) -> None:
    """An account's users into auth.users: no single user or token in the authorization
    block, each unique among all users; the account's default permissions to those that
    have none."""
    where = block.where(key)
    if changes.get("user"):
        raise _at(where, "Can not have a single user/pass and accounts")
    if changes.get("token"):
        raise _at(where, "Can not have a token and accounts")
    taken = identities(auth.users)
    for user in users:
        ident = user.nkey or user.name
        if ident in taken:
            raise _at(where, f'Duplicate {"nkey" if user.nkey else "user"} {_q(ident)} detected')
        taken.add(ident)
        auth.users.append(replace(user, account=account.name,
                                  permissions=user.permissions or account.default_permissions))


def _jetstream(block: Section, key: str, value: Any) -> JetStreamLimits | None:
    """JetStream in an account: off (None), on without limits, or on with the limits of a
    map (the reference's keys and messages)."""
    if isinstance(value, bool):
        return JetStreamLimits() if value else None
    if isinstance(value, str):
        word = value.lower()
        if word in ("disabled", "disable"):
            return None
        if word in ("enabled", "enable"):
            return JetStreamLimits()
        raise _at(block.where(key),
                  f"Expected 'enabled' or 'disabled' for string value, got '{value}'")
    if not isinstance(value, dict):
        raise _at(block.where(key), "Expected map, bool or string to define JetStream, got "
                  f"{_go_type(value)}")
    fields: dict[str, Any] = {}
    for k, lower, item in _entries(value):
        if lower in _JS_LIMIT_KEYS:
            if isinstance(item, bool) or not isinstance(item, int):
                raise _at(_key(value, k), f"Expected a parseable size for {_q(k)}, got "
                          f"{_go_value(item)}")
            fields[_JS_LIMIT_KEYS[lower]] = item
        elif lower in _JS_REQUIRED_KEYS:
            if not isinstance(item, bool):
                raise _at(_key(value, k), f"Expected a parseable bool for {_q(k)}, got "
                          f"{_go_value(item)}")
            fields["max_bytes_required"] = item
        elif lower == "cluster_traffic":
            if item not in ("system", "owner", ""):
                raise _at(_key(value, k), "Expected 'system' or 'owner' string value for "
                          f"{_q(k)}, got {_go_value(item)}")
        else:
            _unknown(value, k)
    return JetStreamLimits(**fields)


def _limits(block: Section, key: str, value: Any) -> AccountLimits:
    if not isinstance(value, dict):
        raise _at(block.where(key),
                  f"Expected account limits to be a map/struct, got {_go_value(value)}")
    fields: dict[str, int] = {}
    names = {"max_connections": "max_connections", "max_conn": "max_connections",
             "max_subscriptions": "max_subscriptions", "max_subs": "max_subscriptions",
             "max_payload": "max_payload", "max_pay": "max_payload",
             "max_leafnodes": "max_leafnodes", "max_leafs": "max_leafnodes"}
    for k, lower, item in _entries(value):
        if lower in names:
            fields[names[lower]] = _int(value, k, item)
        else:
            _unknown(value, k, f"Unknown field {_q(k)} parsing account limits")
    return AccountLimits(**fields)


# -- subject mappings ----------------------------------------------------------------------
def parse_mappings(block: Section, key: str, value: Any) -> tuple[Mapping, ...]:
    """`mappings { source: destination, ... }` (the key `key` of `block`): each destination
    a subject, a map `{destination, weight, cluster}` or a list of them; checked as the
    reference checks them."""
    if not isinstance(value, dict):
        raise _at(block.where(key), f'"{key}": expected a map of subject mappings, got '
                  f"{_go_type(value)}")
    mappings: list[Mapping] = []
    for source, entry in value.items():
        if source in value.variables:
            continue
        if not is_valid_subject(source):
            raise _at(block.where(key), f"Subject {_q(source)} is not a valid subject")
        where = value.where(source)
        if isinstance(entry, str):
            dests: tuple[MapDest, ...] = (MapDest(entry),)
            fail = f"Error adding mapping for {_q(source)} to {_q(entry)} : "
        else:
            if isinstance(entry, list):
                dests = tuple(_map_dest(entry[i], _item(entry, i)) for i in range(len(entry)))
            else:
                dests = (_map_dest(entry, where),)
            fail = f"Error adding mapping for {_q(source)} : "
        error = _mapping_error(source, dests)
        if error:
            raise _at(where, fail + error)
        mappings.append(Mapping(source, dests))
    return tuple(mappings)


def _map_dest(entry: Any, where: str) -> MapDest:
    """One `{destination, weight, cluster}` of a mapping (the reference's
    parseAccountMapDest), whose value is placed at `where`."""
    if not isinstance(entry, dict):
        raise _at(where, "Expected an entry for the mapping destination")
    subject, weight, cluster = "", None, ""
    for k, lower, item in _entries(entry):
        if lower in ("dest", "destination"):
            subject = _string(entry, k, item)
        elif lower == "weight":
            weight = _weight(entry, k, item)
        elif lower == "cluster":
            cluster = _string(entry, k, item)
        elif k not in entry.variables:
            raise _at(entry.where(k), f"Unknown field {_q(k)} for mapping destination")
    if weight is None:
        raise _at(where, f"Missing weight for mapping destination {_q(subject)}")
    return MapDest(subject, weight, cluster)


def _weight(entry: Section, key: str, value: Any) -> int:
    """A destination's weight: a percentage (`40%`, "40") or a number, 0 to 100."""
    if isinstance(value, str):
        text = value.removesuffix("%")
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise _at(entry.where(key), f"Invalid weight {_q(text)} for mapping destination")
        weight = int(text)
    elif isinstance(value, int) and not isinstance(value, bool):
        weight = value
    else:
        shown = _go_value(int(value) if isinstance(value, float) and value.is_integer()
                          else value)
        raise _at(entry.where(key), f"Unknown entry type for weight of {shown}")
    if not 0 <= weight <= 100:
        raise _at(entry.where(key), f"Invalid weight {weight} for mapping destination")
    return weight


def _mapping_error(source: str, dests: tuple[MapDest, ...]) -> str:
    """Why the reference's AddWeightedMappings refuses these destinations of `source`, or
    ""."""
    from ..protocol.transform import TransformError, validate_mapping

    seen: set[str] = set()
    totals: dict[str, int] = {}
    for dest in dests:
        if dest.subject in seen:
            return f"duplicate entry for {_q(dest.subject)}"
        seen.add(dest.subject)
        totals[dest.cluster] = totals.get(dest.cluster, 0) + dest.weight
        if totals[dest.cluster] > 100:
            return "total weight needs to be <= 100"
        if not dest.subject:
            return ("an empty destination is not supported by tidings (the reference takes "
                    "it, then fails on the first message mapped to it)")
        try:
            validate_mapping(source, dest.subject)
        except TransformError as exc:
            return str(exc)
    return ""


# -- exports -------------------------------------------------------------------------------
def _exports(block: Section, key: str, value: Any) -> list[StreamExport | ServiceExport]:
    if not isinstance(value, list):
        raise _at(block.where(key), f"Exports should be an array, got {_go_type(value)}")
    exports: list[StreamExport | ServiceExport] = []
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise _at(_item(value, i),
                      f"Export Items should be a map with type entry, got {_go_type(entry)}")
        export = _export(entry)
        if export is not None:
            exports.append(export)
    return exports


class _ExportReader:
    """The keys of one export map, read in file order as the reference reads them."""

    def __init__(self, entry: Section) -> None:
        self.entry = entry
        self.kind = ""  # "stream" | "service", once read
        self.subject = ""
        self.accounts: tuple[str, ...] = ()
        self.response_type = ""  # once read
        self.threshold: float | None = None
        self.latency: Latency | None = None
        self.allow_trace = False
        # Where the keys of services only were read, refused at a later `stream`.
        self.service_keys: dict[str, str] = {}

    def read(self, key: str, lower: str, value: Any) -> None:
        if lower == "stream":
            self.stream(key, value)
        elif lower == "service":
            self.service(key, value)
        elif lower in ("response", "response_type"):
            self.response(key, value)
        elif lower in ("threshold", "response_threshold", "response_max_time", "response_time"):
            self.response_threshold(key, value)
        elif lower == "accounts":
            self.accounts = self.account_names(key, value)
        elif lower == "latency":
            self.service_keys["latency"] = self.where(key)
            self.latency = _latency(self.entry, key, value)
            self.not_on_stream(key, "latency")
        elif lower == "account_token_position":
            raise _not_yet(self.entry, key, "exports authorized by a token of the subject are")
        elif lower == "allow_trace":
            self.service_keys["allow_trace"] = self.where(key)
            self.allow_trace = _bool(self.entry, key, value)
            self.not_on_stream(key, "allow_trace")
        else:
            _unknown(self.entry, key)

    def where(self, key: str) -> str:
        return self.entry.where(key)

    def not_on_stream(self, key: str, what: str) -> None:
        if self.kind == "stream":
            raise _at(self.where(key), f"Detected {what} directive on non-service")

    def stream(self, key: str, value: Any) -> None:
        if self.kind == "service":
            raise _at(self.where(key), f"Detected stream {_q(value)} but already saw a service")
        for what in ("response", "latency", "allow_trace"):  # the reference's order
            if what in self.service_keys:
                raise _at(self.service_keys[what], f"Detected {what} directive on non-service")
        if not isinstance(value, str):
            raise _at(self.where(key), f"Expected stream name to be string, got {_go_type(value)}")
        self.kind, self.subject = "stream", value

    def service(self, key: str, value: Any) -> None:
        if self.kind == "stream":
            raise _at(self.where(key), f"Detected service {_q(value)} but already saw a stream")
        if not isinstance(value, str):
            raise _at(self.where(key),
                      f"Expected service name to be string, got {_go_type(value)}")
        self.kind, self.subject = "service", value

    def response(self, key: str, value: Any) -> None:
        if "response" in self.service_keys:
            raise _at(self.where(key), "Duplicate response type definition")
        self.service_keys["response"] = self.where(key)
        if not isinstance(value, str):
            raise _at(self.where(key),
                      f"Expected response type to be string, got {_go_type(value)}")
        self.response_type = _RESPONSE_TYPES.get(value.lower(), "")
        if not self.response_type:
            raise _at(self.where(key), f"Unknown response type: {_q(value)}")
        self.not_on_stream(key, "response")

    def response_threshold(self, key: str, value: Any) -> None:
        """(The reference does not hold a threshold read before `stream` against it.)"""
        if self.threshold is not None:
            raise _at(self.where(key), "Duplicate response threshold detected")
        what = "Expected response threshold to be a parseable time duration, got"
        if not isinstance(value, str):
            raise _at(self.where(key), f"{what} {_go_type(value)}")
        seconds = go_duration(value)
        if seconds is None:
            raise _at(self.where(key), f"{what} {_q(value)}")
        self.threshold = seconds
        self.not_on_stream(key, "response")

    def account_names(self, key: str, value: Any) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _at(self.where(key), f'"{key}": expected an array of account names')
        return tuple(value)

    def export(self) -> StreamExport | ServiceExport | None:
        if self.kind == "stream":
            return StreamExport(self.subject, self.accounts)
        if self.kind == "service":
            return ServiceExport(
                self.subject, self.accounts, self.response_type or "Singleton",
                self.threshold or RESPONSE_THRESHOLD,  # 0: the default, as the reference
                self.latency, self.allow_trace)
        return None  # neither: ignored, as by the reference


def _export(entry: Section) -> StreamExport | ServiceExport | None:
    reader = _ExportReader(entry)
    for key, lower, value in _entries(entry):
        reader.read(key, lower, value)
    return reader.export()


def _latency(block: Section, key: str, value: Any) -> Latency:
    """A service export's `latency`: a subject, or a map of `sampling` and `subject` (those
    exact keys; the reference looks no other up)."""
    if isinstance(value, str):
        return Latency(LATENCY_SAMPLING, value)
    if not isinstance(value, dict):
        raise _at(block.where(key),
                  f"Expected latency entry to be a map/struct or string, got {_go_type(value)}")
    sampling = LATENCY_SAMPLING
    if "sampling" in value:
        sampling = _sampling(value, value["sampling"])
    if "subject" not in value:
        raise _at(block.where(key), "Latency subject required, but missing")
    subject = value["subject"]
    if not isinstance(subject, str):
        raise _at(value.where("subject"), "Expected latency subject to be a string, got string")
    return Latency(sampling, subject)


def _sampling(block: Section, value: Any) -> int:
    where = block.where("sampling")
    if isinstance(value, str):
        if value.strip().lower() == "headers":
            return LATENCY_HEADERS
        text = value.removesuffix("%")
        if not re.fullmatch(r"[+-]?\d+", text):
            raise _at(where, f'Failed to parse latency sample: strconv.Atoi: parsing {_q(text)}: '
                      "invalid syntax")
        sample = int(text)
    elif isinstance(value, int) and not isinstance(value, bool):
        sample = value
    else:
        raise _at(where, "Expected latency sample to be a string or map/struct, got "
                  f"{_go_type(value)}")
    if not 1 <= sample <= 100:
        raise _at(where, "bad sampling percentage, should be 1-100")
    return sample


def go_duration(text: str) -> float | None:
    """Seconds of a Go duration string ("1m30s", "500ms", "0"), or None when it is not one."""
    try:
        return units.go_duration(text)
    except ValueError:
        return None


# -- imports -------------------------------------------------------------------------------
def _imports(block: Section, key: str, value: Any) -> list[StreamImport | ServiceImport]:
    if not isinstance(value, list):
        raise _at(block.where(key), f"Imports should be an array, got {_go_type(value)}")
    imports: list[StreamImport | ServiceImport] = []
    services: dict[str, list[ServiceImport]] = {}  # by local subject
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise _at(_item(value, i),
                      f"Import Items should be a map with type entry, got {_go_type(entry)}")
        imported = _import(entry)
        if isinstance(imported, ServiceImport):
            local = imported.to or imported.subject
            for dup in services.get(local, ()):
                if dup.account == imported.account:
                    raise _at(_item(value, i), f"Duplicate service import subject {_q(local)}, "
                              f"previously used in import for account {_q(dup.account)}, "
                              f"subject {_q(dup.subject)}")
            services.setdefault(local, []).append(imported)
        if imported is not None:
            imports.append(imported)
    return imports


def _import(entry: Section) -> StreamImport | ServiceImport | None:
    kind, account, subject = "", "", ""
    fields: dict[str, Any] = {}
    where: dict[str, str] = {}
    for key, lower, value in _entries(entry):
        if lower in ("stream", "service"):
            if kind:
                other = "service" if lower == "stream" else "stream"
                raise _at(entry.where(key), f"Detected {lower} but already saw a {other}")
            if lower == "service" and "allow_trace" in where:
                raise _at(where["allow_trace"], "Detected allow_trace directive on a non-stream")
            kind = lower
            account, subject = _import_source(entry, key, value)
        elif lower in ("prefix", "to"):
            fields[lower], where[lower] = _string(entry, key, value), entry.where(key)
        elif lower in ("share", "allow_trace"):
            if lower == "allow_trace" and kind == "service":
                raise _at(entry.where(key), "Detected allow_trace directive on a non-stream")
            fields[lower], where[lower] = _bool(entry, key, value), entry.where(key)
        else:
            _unknown(entry, key)
    if kind == "stream":
        prefix = fields.get("prefix", "")
        if prefix and fields.get("to"):
            raise _at(where["to"], "Stream import can not have a 'prefix' and a 'to' property")
        to = fields.get("to", "")
        if prefix:
            to = (prefix if prefix.endswith(".") else prefix + ".") + subject
        return StreamImport(account, subject, to, prefix, fields.get("allow_trace", False))
    if kind == "service":
        return ServiceImport(account, subject, fields.get("to", ""), fields.get("share", False))
    return None  # neither: ignored, as by the reference


def _import_source(entry: Section, key: str, value: Any) -> tuple[str, str]:
    """The `{account: A, subject: S}` of an import."""
    if not isinstance(value, dict):
        what = "Stream" if key.lower() == "stream" else "Service"
        raise _at(entry.where(key), f"{what} entry should be an account map, got "
                  f"{_go_type(value)}")
    account = subject = ""
    for k, lower, item in _entries(value):
        if lower == "account":
            account = _string(value, k, item)
        elif lower == "subject":
            subject = _string(value, k, item)
        else:
            _unknown(value, k)
    if not account or not subject:
        raise _at(entry.where(key), "Expect an account name and a subject")
    return account, subject


# -- once all accounts are read ------------------------------------------------------------
def _resolve(accounts: dict[str, AccountConfig], where: str) -> None:
    """The reference's checks once the block is read (parseAccounts, then adding each export
    and import: accounts.go), in its order: stream exports, service exports, stream imports,
    service imports. Errors are placed at the `accounts` key."""
    for account in accounts.values():
        for export in account.exports:
            if isinstance(export, StreamExport):
                _check_export_accounts(accounts, export, "stream", where)
    for account in accounts.values():
        for i, export in enumerate(account.exports):
            if isinstance(export, ServiceExport):
                _check_export_accounts(accounts, export, "service", where)
                _check_latency(account, i, export, where)
    graph = _ImportGraph(accounts)
    for account in accounts.values():
        for imported in account.imports:
            if isinstance(imported, StreamImport):
                graph.add_stream(account, imported, where)
    for account in accounts.values():
        for imported in account.imports:
            if isinstance(imported, ServiceImport):
                graph.add_service(account, imported, where)


def _check_export_accounts(accounts: dict[str, AccountConfig],
                           export: StreamExport | ServiceExport, kind: str, where: str) -> None:
    for name in export.accounts:
        if name not in accounts:
            raise _at(where, f"{_q(name)} account not defined for {kind} export")


def _check_latency(account: AccountConfig, index: int, export: ServiceExport,
                   where: str) -> None:
    latency = export.latency
    if latency is None:
        return
    error = ""
    services = [e.subject for e in account.exports[: index + 1] if isinstance(e, ServiceExport)]
    if not is_valid_subject(latency.subject) or not _is_literal(latency.subject):
        error = "invalid publish subject"
    elif any(_subset(latency.subject, s) for s in services):
        error = "invalid publish subject"  # its results would loop into the service
    elif export.response_type != "Singleton":
        error = "bad service response type"
    if error:
        raise _at(where, f"Error adding service latency sampling for {_q(export.subject)} on "
                  f"subject {_q(latency.subject)}: {error}")


class _ImportGraph:
    """The imports added so far, as the reference adds them one at a time: each checked for
    authorization, its mapping, duplicates and the cycles it would close."""

    def __init__(self, accounts: dict[str, AccountConfig]) -> None:
        self.accounts = accounts
        self.streams: dict[str, list[tuple[str, str, str]]] = {}  # account: (source, from, to)
        self.services: dict[str, list[tuple[str, str, str]]] = {}  # account: (source, from, to)

    def add_stream(self, account: AccountConfig, imported: StreamImport, where: str) -> None:
        source = self.accounts.get(imported.account)
        if source is None:
            raise _at(where, f"{_q(imported.account)} account not defined for stream import")
        subject = imported.subject

        def fail(why: str) -> ConfigError:
            return _at(where, f"Error adding stream import {_q(subject)}: {why}")

        if not _authorized(source, account.name, subject, StreamExport):
            raise fail("stream import not authorized")
        if imported.prefix and not _is_literal(imported.prefix):
            raise fail("stream import prefix can not contain wildcard tokens")
        to = imported.to or subject
        if self.stream_cycle(source.name, to, {account.name}) or \
                self.stream_cycle(source.name, subject, {account.name}):
            raise fail("import forms a cycle")
        if _has_wildcard(subject) and to != subject:
            error = _import_mapping_error(subject, _tokenize(to))
            if error:
                raise fail("failed to create mapping transform for stream import subject from "
                           f"{_q(subject)} to {_q(to)}: {error}")
            to = _untokenize(to)
        mine = self.streams.setdefault(account.name, [])
        if any(s == source.name and f == subject for s, f, _ in mine):
            raise fail("stream import already exists")
        mine.append((source.name, subject, to))

    def stream_cycle(self, name: str, to: str, visited: set[str]) -> bool:
        """The reference's checkStreamImportsForCycles, from account `name`."""
        account = self.accounts[name]
        if not any(_subset(to, e.subject) for e in account.exports
                   if isinstance(e, StreamExport)):
            return False
        for source, _, their_to in self.streams.get(name, ()):
            if _collide(to, their_to):
                if source in visited:
                    return True
                visited.add(name)
                if self.stream_cycle(source, their_to if _subset(their_to, to) else to,
                                     visited):
                    return True
        return False

    def add_service(self, account: AccountConfig, imported: ServiceImport, where: str) -> None:
        source = self.accounts.get(imported.account)
        if source is None:
            raise _at(where, f"{_q(imported.account)} account not defined for service import")
        local, remote = imported.to or imported.subject, imported.subject

        def fail(why: str) -> ConfigError:
            return _at(where, f"Error adding service import {_q(remote)}: {why}")

        if not is_valid_subject(local) or not is_valid_subject(remote):
            raise fail("sublist: invalid subject")
        if not _authorized(source, account.name, remote, ServiceExport):
            raise fail("service import not authorized")
        mapped = _has_wildcard(remote) and remote != local
        if self.service_cycle(source.name, _untokenize(local) if _has_wildcard(remote) else local,
                              {account.name}):
            raise fail("import forms a cycle")
        if mapped:
            error = _import_mapping_error(_untokenize(remote), _tokenize(local))
            if error:
                raise fail("failed to create mapping transform for service import subject from "
                           f"{_q(local)} to {_q(_untokenize(remote))}: {error}")
            local, remote = _untokenize(local), _untokenize(remote)
        self.services.setdefault(account.name, []).append((source.name, local, remote))

    def service_cycle(self, name: str, local: str, visited: set[str]) -> bool:
        """The reference's checkServiceImportsForCycles, from account `name`."""
        for source, their_from, their_to in self.services.get(name, ()):
            if _collide(local, their_to):
                if source in visited:
                    return True
                visited.add(name)
                if self.service_cycle(source, their_from if _subset(their_from, local)
                                      else local, visited):
                    return True
        return False


def _authorized(source: AccountConfig, importer: str, subject: str,
                kind: type[StreamExport] | type[ServiceExport]) -> bool:
    """An export of `source` of that kind lets `importer` import `subject`: the same subject,
    else one whose subjects include it; public, or naming the importer."""
    if not is_valid_subject(subject):
        return False
    exports = [e for e in source.exports if isinstance(e, kind)]
    exact = [e for e in exports if e.subject == subject]
    for export in exact or [e for e in exports if _subset(subject, e.subject)]:
        return not export.accounts or importer in export.accounts
    return False


# -- subjects, as the reference compares them ----------------------------------------------
def _tokens(subject: str) -> list[str]:
    return subject.split(".")


def _is_literal(subject: str) -> bool:
    """No `*` or `>` token (validity aside), as the reference's subjectIsLiteral."""
    return not any(t in ("*", ">") for t in _tokens(subject))


def _has_wildcard(subject: str) -> bool:
    return not _is_literal(subject)


def _subset(subject: str, test: str) -> bool:
    """Every subject `subject` matches, `test` matches (the reference's isSubsetMatch)."""
    tokens, tests = _tokens(subject), _tokens(test)
    for i, t2 in enumerate(tests):
        if i >= len(tokens) or not t2:
            return False
        if t2 == ">":
            return True
        t1 = tokens[i]
        if not t1 or t1 == ">":
            return False
        if t1 == "*":
            if t2 != "*":
                return False
            continue
        if t2 != "*" and t1 != t2:
            return False
    return len(tokens) == len(tests)


def _collide(a: str, b: str) -> bool:
    """Some subject matches both (the reference's SubjectsCollide)."""
    if a == b:
        return True
    ta, tb = _tokens(a), _tokens(b)
    if _is_literal(a) and _is_literal(b):
        return False
    if _is_literal(a):
        return _subset(a, b)
    if _is_literal(b):
        return _subset(b, a)
    fa, fb = ">" in ta, ">" in tb
    if not fa and not fb and len(ta) != len(tb):
        return False
    if (len(ta) < len(tb) and not fa) or (len(tb) < len(ta) and not fb):
        return False
    return all(x == y or x in ("*", ">") or y in ("*", ">") for x, y in zip(ta, tb, strict=False))


_WILDCARD_FUNCTION = re.compile(r"{{\s*[wW]ildcard\s*\((.*)\)\s*}}")
_FUNCTION = re.compile(r"{{\s*(partition|splitfromleft|splitfromright|slicefromleft|"
                       r"slicefromright|split|left|right|random)\s*\(.*\)\s*}}", re.IGNORECASE)
_INVALID_MAPPING = "invalid mapping destination"


def _tokenize(subject: str) -> str:
    """`*` tokens as `$1`, `$2`, ... (the reference's transformTokenize)."""
    out, n = [], 0
    for token in _tokens(subject):
        if token == "*":
            n += 1
            token = f"${n}"
        out.append(token)
    return ".".join(out)


def _untokenize(subject: str) -> str:
    """`$N` and `{{wildcard(N)}}` tokens as `*` (the reference's transformUntokenize)."""
    out = []
    for token in _tokens(subject):
        m = _WILDCARD_FUNCTION.fullmatch(token)
        placeholder = (len(token) > 1 and token[0] == "$" and token[1] in "123456789") or (
            m is not None and "," not in m.group(1) and m.group(1) != "")
        out.append("*" if placeholder else token)
    return ".".join(out)


def _placeholder(token: str) -> tuple[str, list[int]]:
    """What a token of a mapping's destination is: ("", []) a literal, ("wildcard",
    [index]), ("function", []) another mapping function; ValueError with the reference's
    words for a malformed one."""
    if len(token) > 1 and token[0] == "$":
        return ("wildcard", [int(token[1:])]) if token[1:].isdigit() else ("", [])
    if len(token) > 4 and token.startswith("{{") and token.endswith("}}"):
        m = _WILDCARD_FUNCTION.fullmatch(token)
        if m is not None:
            args = re.split(r",\s*", m.group(1))
            if args == [""]:
                raise ValueError(f"{_INVALID_MAPPING}: not enough arguments passed to the "
                                 f"function in {token}")
            if len(args) > 1:
                raise ValueError(f"{_INVALID_MAPPING}: too many arguments passed to the "
                                 f"function in {token}")
            if not re.fullmatch(r"[+-]?\d+", args[0].strip(" ")):
                raise ValueError(f"{_INVALID_MAPPING}: function argument is invalid or in the "
                                 f"wrong format in {token}")
            return "wildcard", [int(args[0].strip(" "))]
        if _FUNCTION.fullmatch(token):
            return "function", []
        raise ValueError(f"{_INVALID_MAPPING}: unknown function in {token}")
    return "", []


def _import_mapping_error(source: str, destination: str) -> str:
    """Why the reference refuses the mapping of an import from `source` (with wildcards) to
    `destination` (NewSubjectTransformStrict), or ""."""
    stokens, dtokens = _tokens(source), _tokens(destination)
    if (not is_valid_subject(source) or not is_valid_subject(destination) or "*" in dtokens
            or (">" in stokens) != (">" in dtokens)):
        return "invalid subject"
    wildcards, used = stokens.count("*"), 0
    for token in dtokens:
        try:
            kind, indexes = _placeholder(token)
        except ValueError as exc:
            return str(exc)
        if kind == "function":
            return (f"{_INVALID_MAPPING}: the only mapping function allowed for import "
                    f"transforms is {{{{Wildcard()}}}} in {token}")
        used += len(indexes)
        for index in indexes:
            if index > wildcards:
                return f"{_INVALID_MAPPING}: wildcard index out of range in {token}: [{index}]"
    if used < wildcards:
        return f"{_INVALID_MAPPING}: not using all of the token wildcard(s) in {destination}"
    return ""


# -- checks of the whole -------------------------------------------------------------------
def check_system_account(auth: AuthOptions) -> None:
    """`system_account` names the global account or one of the block's (ValueError with the
    reference's words, which it says at start)."""
    name = auth.system_account
    if name and name != GLOBAL_ACCOUNT and name not in auth.accounts:
        raise ValueError("error resolving system account: account missing")
