"""JetStream's configuration, as nats-server 2.11 and later read it (opts.go: parseJetStream,
the top-level `store_dir`, the `-js` and `-sd` flags) and run it (jetstream.go:
EnableJetStream, dynJetStreamConfig; disk_avail.go).

Forms: `jetstream: true` / `false`, `jetstream: enabled` / `disabled` (also `enable`,
`disable`, any case), and `jetstream { ... }`, which turns JetStream on unless it says
`enabled: false`. The storage directory may be given once: in the block (`store_dir`,
`store`, `storedir`), at the top level (`store_dir`, `storedir`) or with `-sd`; given twice
it is the reference's "Duplicate 'store_dir' configuration" (`-sd` with a file that sets it
too included, as the reference's flags are read before the file).

Units, as the reference reads them here: `max_memory_store`, `max_file_store` and
`max_buffered_size` are its getStorageSize sizes (an integer, the file's `1G` and `1GB`
included, or a string ending in K, M, G or T, powers of 1024); `sync_interval` is a Go
duration string ("2m", "500ms") or `always`, and, as tidings takes every duration, an
integer number of seconds (which the reference takes with a warning when it starts, and
refuses under -t); the limits' durations are Go duration strings.

What the server runs with (`JetStreamOptions.resolved`, the reference's JetStreamConfig):
the store is `<store_dir>/jetstream`; with no store_dir, `$TMPDIR/nats/jetstream` (or
`$TMPDIR/jetstream` when both maxima are configured above 0, as the reference decides);
a maximum not configured (or negative) comes from the machine (`defaults_for_machine`):
memory 75% of the RAM (256 MiB when it cannot be read), file storage 75% of the free space
of the disk that holds the store (1 TiB when it cannot be read). A maximum of 0 is kept.

Errors are the reference's words at the reference's place: a key of the block at that key;
the whole value (`jetstream: maybe`), and a value of another type where the reference
asserts one (its Go panic, "interface conversion: ..."), at the top-level key (ValueError,
placed there by config/server.py). Keys that need encryption at rest or a JetStream cluster
are refused by name ("... is not supported by tidings yet").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from ..protocol.subjects import is_valid_subject
from .parser import ConfigError, Section
from .units import go_duration, go_quote

# The JetStream API level served: the one of the version tidings announces (nats-server
# 2.11.0: level 1), in INFO (`api_lvl`) and /varz. (jetstream/stream.py has it too, for the
# streams' metadata: one of them should import the other.)
API_LEVEL = 1
STORE_DIR_NAME = "jetstream"  # the folder under store_dir that holds the store
MAX_STORE_DEFAULT = 1 << 40  # 1 TiB: when the disk's free space cannot be read
MAX_MEMORY_DEFAULT = 256 << 20  # when the machine's memory cannot be read
DEFAULT_SYNC_INTERVAL = 120.0  # seconds between fsyncs of the file store
DEFAULT_MAX_BUFFERED_MSGS = 100_000  # a stream's ingest queue, as the reference's
DEFAULT_MAX_BUFFERED_SIZE = 128 << 20
DEFAULT_REQUEST_QUEUE_LIMIT = 10_000  # API requests waiting (info requests: the same)
DEFAULT_CONCURRENT_IO = 4096
MIN_CONCURRENT_IO, MAX_CONCURRENT_IO = 4, 8192
_NS = 1_000_000_000
_NOT_YET = "not supported by tidings yet"


@dataclass
class JetStreamLimits:
    """`limits { }`: the server's own bounds on what streams and consumers ask for (the
    reference's JSLimitOpts); 0 is none. Durations in seconds."""

    max_request_batch: int = 0
    max_ack_pending: int = 0
    duplicate_window: float = 0.0  # shown as max_duplicate_window
    max_batch_inflight_per_stream: int = 0  # `batch { max_inflight_per_stream }`
    max_batch_inflight_total: int = 0  # `batch { max_inflight_total }`
    max_batch_size: int = 0  # `batch { max_msgs }`
    max_batch_timeout: float = 0.0  # `batch { timeout }`

    def as_json(self) -> dict[str, Any]:
        """As the reference's /varz shows them: its order, only those set."""
        shown = {"max_request_batch": self.max_request_batch,
                 "max_ack_pending": self.max_ack_pending,
                 "max_duplicate_window": round(self.duplicate_window * _NS),
                 "max_batch_inflight_per_stream": self.max_batch_inflight_per_stream,
                 "max_batch_inflight_total": self.max_batch_inflight_total,
                 "max_batch_size": self.max_batch_size,
                 "max_batch_timeout": round(self.max_batch_timeout * _NS)}
        return {k: v for k, v in shown.items() if v}


@dataclass(frozen=True)
class JetStreamConfig:
    """What a server runs JetStream with (the reference's JetStreamConfig): the store's own
    directory and the maxima in bytes, resolved from the options and the machine."""

    max_memory: int
    max_storage: int
    store_dir: str
    sync_interval: float
    sync_always: bool
    domain: str
    compress_ok: bool
    unique_tag: str
    strict: bool

    def as_json(self) -> dict[str, Any]:
        """The reference's JSON of it (/varz, /jsz): its order, its omitted empty values."""
        shown: dict[str, Any] = {"max_memory": self.max_memory,
                                 "max_storage": self.max_storage}
        optional = {"store_dir": self.store_dir,
                    "sync_interval": round(self.sync_interval * _NS),
                    "sync_always": self.sync_always, "domain": self.domain,
                    "compress_ok": self.compress_ok, "unique_tag": self.unique_tag,
                    "strict": self.strict}
        shown.update((k, v) for k, v in optional.items() if v)
        return shown


@dataclass
class JetStreamOptions:
    """The `jetstream` key, the top-level `store_dir` and the -js/-sd flags."""

    enabled: bool = True
    store_dir: str = ""  # as given; the store itself is <store_dir>/jetstream
    max_memory: int | None = None  # max_memory_store; None (or < 0): from the machine
    max_file: int | None = None  # max_file_store; None (or < 0): from the machine
    sync_interval: float = DEFAULT_SYNC_INTERVAL  # seconds
    sync_always: bool = False  # `sync_interval: always`: fsync every write
    strict: bool = True  # API requests with unknown fields refused
    domain: str = ""
    unique_tag: str = ""  # lower case, trimmed
    limits: JetStreamLimits = field(default_factory=JetStreamLimits)
    # 0: the reference's defaults (DEFAULT_*; info_queue_limit: request_queue_limit's).
    max_buffered_size: int = 0  # bytes queued for a stream's ingest
    max_buffered_msgs: int = 0  # messages queued for a stream's ingest
    request_queue_limit: int = 0  # API requests waiting
    info_queue_limit: int = 0  # info requests waiting
    max_concurrent_io: int = 0  # the reference's disk IO goroutines
    # Where the file set store_dir ("FILE:LINE:COL"), for -sd's duplicate.
    store_dir_where: str = field(default="", compare=False, repr=False)

    @cached_property
    def resolved(self) -> JetStreamConfig:
        """What the server runs with, computed once (the machine's share when a maximum
        is not configured), as the reference's EnableJetStream does at start."""
        return _resolve(self)


# -- the machine ---------------------------------------------------------------------------
def system_memory() -> int:
    """Bytes of RAM (the reference's sysmem.Memory); 0 when it cannot be read."""
    try:
        return max(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), 0)
    except (AttributeError, OSError, ValueError):
        return 0


def disk_available(store_dir: str) -> int:
    """75% of the space free to us on the disk that holds `store_dir` (the reference's
    diskAvailable), looked up at its nearest existing folder; 1 TiB when unknown."""
    path = os.path.abspath(store_dir)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        st = os.statvfs(path)
    except (AttributeError, OSError):
        return MAX_STORE_DEFAULT
    return st.f_bavail * st.f_bsize // 4 * 3


def defaults_for_machine(store_dir: str) -> tuple[int, int]:
    """(max_memory, max_file) when not configured: 75% of the RAM (256 MiB when unknown)
    and 75% of the free space of the disk holding `store_dir` (1 TiB when unknown)."""
    memory = system_memory()
    return (memory // 4 * 3 if memory > 0 else MAX_MEMORY_DEFAULT), disk_available(store_dir)


def temp_dir() -> str:
    """The OS's temporary folder as Go's os.TempDir gives it ($TMPDIR, else /tmp)."""
    if os.name == "posix":
        return os.environ.get("TMPDIR") or "/tmp"
    import tempfile

    return tempfile.gettempdir()


def _resolve(js: JetStreamOptions) -> JetStreamConfig:
    memory = -1 if js.max_memory is None else js.max_memory
    storage = -1 if js.max_file is None else js.max_file
    if memory > 0 and storage > 0:
        # The reference's configured path: no "nats" folder, compression announced.
        store_dir = os.path.join(js.store_dir or temp_dir(), STORE_DIR_NAME)
        compress_ok = True
    else:
        store_dir = (os.path.join(js.store_dir, STORE_DIR_NAME) if js.store_dir
                     else os.path.join(temp_dir(), "nats", STORE_DIR_NAME))
        compress_ok = False
        if memory < 0:
            memory = defaults_for_machine(store_dir)[0]
        if storage < 0:
            storage = disk_available(store_dir)
    return JetStreamConfig(
        max_memory=memory, max_storage=storage, store_dir=store_dir,
        sync_interval=js.sync_interval, sync_always=js.sync_always, domain=js.domain,
        compress_ok=compress_ok, unique_tag=js.unique_tag, strict=js.strict)


# -- Go's words for values ---------------------------------------------------------------------
def go_type(value: Any) -> str:
    """Go's %T of a value of the file."""
    for kind, name in ((bool, "bool"), (int, "int64"), (float, "float64"), (str, "string"),
                       (dict, "map[string]interface {}"), (list, "[]interface {}")):
        if isinstance(value, kind):
            return name
    return "time.Time"


def _go_float(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)


def go_value(value: Any) -> str:
    """Go's %v of a value of the file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_value(v)}" for k, v in sorted(value.items())) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_value(v) for v in value) + "]"
    return str(value)


def go_s(value: Any) -> str:
    """Go's %s of a value of the file (a string as it is, a number as Go's %!s(...))."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_s(v)}" for k, v in sorted(value.items())) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_s(v) for v in value) + "]"
    return f"%!s({go_type(value)}={go_value(value)})"


def _conversion(value: Any, want: str) -> ValueError:
    """The reference's panic on a value of another type (placed at the top-level key)."""
    return ValueError(f"interface conversion: interface {{}} is {go_type(value)}, not {want}")


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise _conversion(value, "string")
    return value


def _int64(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _conversion(value, "int64")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _conversion(value, "bool")
    return value


# -- units ------------------------------------------------------------------------------------
def _parse_int64(raw: bytes) -> int:
    """strconv.ParseInt(s, 10, 64), with its errors."""
    if re.fullmatch(rb"[+-]?\d+", raw) is None:
        raise ValueError(f"strconv.ParseInt: parsing {go_quote(raw)}: invalid syntax")
    number = int(raw)
    if not -(1 << 63) <= number < (1 << 63):
        raise ValueError(f"strconv.ParseInt: parsing {go_quote(raw)}: value out of range")
    return number


_STORAGE_SUFFIXES = {b"K": 10, b"M": 20, b"G": 30, b"T": 40}


def storage_size(value: Any) -> int:
    """Bytes of a JetStream storage size (the reference's getStorageSize): an integer, or a
    string of digits ending in K, M, G or T (powers of 1024); "" is 0."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise ValueError("must be int64 or string")
    if not value:
        return 0
    raw = value.encode()
    number = _parse_int64(raw[:-1])
    shift = _STORAGE_SUFFIXES.get(raw[-1:])
    if shift is None:
        raise ValueError("sizes defined as strings must end in K, M, G, T")
    return number << shift


# -- the file -------------------------------------------------------------------------------
def _where(section: Any, key: str) -> str:
    return section.where(key) if isinstance(section, Section) else "?"


def _at(section: Any, key: str, message: str) -> ConfigError:
    return ConfigError(f"{_where(section, key)}: {message}")


def _not_yet(section: Any, key: str, what: str) -> ConfigError:
    return _at(section, key, f'"{key}": {what} is {_NOT_YET}')


def _unknown(section: Any, key: str) -> None:
    if key not in getattr(section, "variables", ()):
        raise _at(section, key, f'unknown field "{key}"')


_ENCRYPTION = "JetStream encryption at rest"
# Keys of the reference's block that tidings refuses, and what they are.
REFUSED = {
    **dict.fromkeys(("key", "ek", "encryption_key", "prev_key", "prev_ek",
                     "prev_encryption_key", "cipher"), _ENCRYPTION),
    "tpm": f"{_ENCRYPTION} with a key sealed by a TPM",
    "max_outstanding_catchup": "catching up the replicas of clustered JetStream",
    **dict.fromkeys(("meta_compact", "meta_compact_size", "meta_compact_sync"),
                    "compacting the meta layer of clustered JetStream"),
    "extension_hint": "extending the meta group of clustered JetStream",
}


def parse_jetstream(value: Any, base: JetStreamOptions | None = None) -> JetStreamOptions:
    """The top-level `jetstream` value over `base` (what `store_dir` set before it).
    ConfigError where a key of the block is wrong; ValueError for the whole value."""
    js = replace(base) if base is not None else JetStreamOptions(enabled=False)
    if isinstance(value, bool):
        js.enabled = value
    elif isinstance(value, str):
        word = value.lower()
        if word not in ("enabled", "enable", "disabled", "disable"):
            raise ValueError(f"Expected 'enabled' or 'disabled' for string value, "
                             f"got '{value}'")
        js.enabled = word in ("enabled", "enable")
    elif isinstance(value, dict):
        js.enabled = True
        for key, item in value.items():
            _block_key(js, value, key, item)
    else:
        raise ValueError(f"Expected map, bool or string to define JetStream, "
                         f"got {go_type(value)}")
    return js


def parse_store_dir(conf: Section, key: str, base: JetStreamOptions | None) -> JetStreamOptions:
    """The top-level `store_dir` (`storedir`) over `base`."""
    js = replace(base) if base is not None else JetStreamOptions(enabled=False)
    if js.store_dir:
        raise _at(conf, key, "Duplicate 'store_dir' configuration")
    js.store_dir, js.store_dir_where = _string(conf[key]), conf.where(key)
    return js


def _block_key(js: JetStreamOptions, block: Any, key: str, item: Any) -> None:
    name = key.lower()
    if name in REFUSED:
        raise _not_yet(block, key, REFUSED[name])
    if name in _SIZES:
        field_name, label = _SIZES[name]
        try:
            setattr(js, field_name, storage_size(item))
        except ValueError as exc:
            raise _at(block, key, f"{label or name} {exc}") from None
    elif name in _COUNTS:
        if isinstance(item, bool) or not isinstance(item, int):
            raise _at(block, key, f"Expected a parseable size for {go_quote(key)}, "
                                  f"got {go_value(item)}")
        setattr(js, _COUNTS[name], item)
    elif name in _OTHER_KEYS:
        _OTHER_KEYS[name](js, block, key, item)
    else:
        _unknown(block, key)


def _strict(js: JetStreamOptions, block: Any, key: str, item: Any) -> None:
    if not isinstance(item, bool):
        raise _at(block, key, f"Expected 'true' or 'false' for bool value, got '{go_s(item)}'")
    js.strict = item


def _store(js: JetStreamOptions, block: Any, key: str, item: Any) -> None:
    if js.store_dir:
        raise _at(block, key, "Duplicate 'store_dir' configuration")
    js.store_dir, js.store_dir_where = _string(item), _where(block, key)


def _sync(js: JetStreamOptions, block: Any, key: str, item: Any) -> None:
    if isinstance(item, str) and item.lower() == "always":
        js.sync_interval, js.sync_always = DEFAULT_SYNC_INTERVAL, True
    elif isinstance(item, str):
        try:
            js.sync_interval = go_duration(item)
        except ValueError as exc:
            raise _at(block, key, f"error parsing {key}: {exc}") from None
    else:
        js.sync_interval = float(_int64(item))  # seconds, the reference's older form


def _concurrent_io(js: JetStreamOptions, block: Any, key: str, item: Any) -> None:
    ok = isinstance(item, int) and not isinstance(item, bool)
    if not ok or not MIN_CONCURRENT_IO <= item <= MAX_CONCURRENT_IO:
        raise _at(block, key, f"Expected an absolute size for {go_quote(key)} between "
                              f"{MIN_CONCURRENT_IO} and {MAX_CONCURRENT_IO}, got {go_value(item)}")
    js.max_concurrent_io = item


def _set(field_name: str, convert: Any) -> Any:
    def handle(js: JetStreamOptions, block: Any, key: str, item: Any) -> None:
        setattr(js, field_name, convert(item))

    return handle


def _limits_key(js: JetStreamOptions, block: Any, key: str, item: Any) -> None:
    js.limits = parse_limits(block, key, item)


# Sizes: key -> (field, the name its errors give it; None: the key's own, lower case).
_SIZES = {
    **dict.fromkeys(("max_memory_store", "max_mem_store", "max_mem"),
                    ("max_memory", "max_mem_store")),
    **dict.fromkeys(("max_file_store", "max_file"), ("max_file", "max_file_store")),
    "max_buffered_size": ("max_buffered_size", None),
}
_COUNTS = {"max_buffered_msgs": "max_buffered_msgs",
           "request_queue_limit": "request_queue_limit",
           "info_queue_limit": "info_queue_limit"}
_OTHER_KEYS = {
    "strict": _strict,
    **dict.fromkeys(("store", "store_dir", "storedir"), _store),
    **dict.fromkeys(("sync", "sync_interval"), _sync),
    "domain": _set("domain", _string),
    **dict.fromkeys(("enable", "enabled"), _set("enabled", _bool)),
    "unique_tag": _set("unique_tag", lambda v: _string(v).strip().lower()),
    "limits": _limits_key,
    "max_concurrent_io": _concurrent_io,
}


def parse_limits(block: Any, key: str, value: Any) -> JetStreamLimits:
    """`limits { }` (the value of `key` in `block`)."""
    if not isinstance(value, dict):
        raise _at(block, key, f"Expected a map to define JetStreamLimits, got {go_type(value)}")
    limits = JetStreamLimits()
    for k, item in value.items():
        name = k.lower()
        if name == "max_ack_pending":
            limits.max_ack_pending = _int64(item)
        elif name == "max_request_batch":
            limits.max_request_batch = _int64(item)
        elif name == "duplicate_window":
            limits.duplicate_window = _limit_duration(item)
        elif name == "batch":
            _batch(limits, value, k, item)
        elif name == "max_ha_assets":
            raise _not_yet(value, k, "a limit of the replicated assets of clustered JetStream")
        else:
            _unknown(value, k)
    return limits


def _limit_duration(item: Any) -> float:
    """A Go duration string; its error is the reference's, which says nowhere."""
    text = _string(item)
    try:
        return go_duration(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _batch(limits: JetStreamLimits, block: Any, key: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise _at(block, key, f"Expected a map to define batch limits, got {go_type(value)}")
    fields = {"max_inflight_per_stream": "max_batch_inflight_per_stream",
              "max_inflight_total": "max_batch_inflight_total", "max_msgs": "max_batch_size"}
    for k, item in value.items():
        name = k.lower()
        if name in fields:
            setattr(limits, fields[name], _int64(item))
        elif name == "timeout":
            limits.max_batch_timeout = _limit_duration(item)
        else:
            _unknown(value, k)


# -- the checks at start ----------------------------------------------------------------------
def check_jetstream(js: JetStreamOptions) -> None:
    """Raise ValueError for what the reference refuses at start (validateJetStreamOptions):
    a domain that cannot be a token of `$JS.<domain>.API.>`."""
    if not js.domain:
        return
    subject = f"$JS.{js.domain}.API.>"
    if not is_valid_subject(subject):
        raise ValueError(f"invalid domain name: derived {go_quote(subject)} is not a valid "
                         "subject")
    if any(c in js.domain for c in " \t\r\n\f.*>"):
        raise ValueError("invalid domain name: may not contain ., * or >")


def jetstream_from_flags(base: JetStreamOptions | None, enable: bool | None,
                         store_dir: str | None) -> JetStreamOptions:
    """`base` (the file's) with -js (True, or False for -js=false) and -sd over it. As in
    the reference, -sd with a file that sets store_dir is a duplicate, at the file's key."""
    js = replace(base) if base is not None else JetStreamOptions(enabled=False)
    if store_dir:
        if js.store_dir_where:
            raise ConfigError(f"{js.store_dir_where}: Duplicate 'store_dir' configuration")
        js.store_dir = store_dir
    if enable is not None:
        js.enabled = enable
    return js
