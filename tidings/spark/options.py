"""Options of the `nats` data source, parsed once on the driver into plain picklable values.

Spark hands a Python data source its options as strings under lower-cased names
(`option("startSequence", 5)` arrives as `{"startsequence": "5"}`), so every lookup here is by
the lower-cased name and every value is converted from text. Errors name the option as
documented (camelCase).

`OPTIONS` lists every option and what it applies to; an option that does nothing where it is
given (misspelt, or meant for another use) is refused.
"""

from __future__ import annotations

import difflib
import json
import re
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from ..protocol.subjects import is_valid_subject
from .planning import name_matches

DEFAULT_URL = "nats://127.0.0.1:4222"
DEFAULT_CLUSTER_ID = "test-cluster"
SUBSCRIPTION_PARTITION = 50_000  # default messagesPerPartition, subscription reads
FETCH_PARTITION = 250_000  # default messagesPerPartition when the server answers fetches


class OptionError(ValueError):
    """An option of the `nats` data source is unknown, misplaced or has a bad value."""


class Use(Enum):
    """What the data source is asked to do; each takes its own options."""

    BATCH_READ = "batch read"
    STREAM_READ = "streaming read"
    BATCH_WRITE = "batch write"
    STREAM_WRITE = "streaming write"


READS = frozenset({Use.BATCH_READ, Use.STREAM_READ})
WRITES = frozenset({Use.BATCH_WRITE, Use.STREAM_WRITE})
ANY = READS | WRITES

# Every option, named as in docs/spark.md, and the uses it applies to. The parsers below read
# only names listed here (`_get` refuses others) and `check_names` accepts only these.
OPTIONS: dict[str, frozenset[Use]] = {
    # reading
    "channels": READS,
    "channel": READS,
    "channelPattern": READS,
    "streams": READS,
    "stream": READS,
    "streamPattern": READS,
    "subjects": READS,
    "startSequence": READS,
    "endSequence": frozenset({Use.BATCH_READ}),
    "startTime": READS,
    "messagesPerPartition": READS,
    "fetch": READS,
    "minPartitionsPerChannel": frozenset({Use.BATCH_READ}),
    "maxInFlight": READS,
    "maxBytesInFlight": READS,
    "ackWait": READS,
    "batchSize": READS,
    "readTimeout": READS,
    "startingOffsets": frozenset({Use.STREAM_READ}),
    "maxMessagesPerTrigger": frozenset({Use.STREAM_READ}),
    "pauseFile": frozenset({Use.STREAM_READ}),
    # writing
    "target": WRITES,
    "subject": WRITES,
    "pubAckWait": WRITES,
    "maxPubAcksInFlight": WRITES,
    # connection
    "url": ANY,
    "clusterId": ANY,
    "clientIdPrefix": ANY,
    "user": ANY,
    "password": ANY,
    "token": ANY,
    "credsFile": ANY,
    "nkeySeedFile": ANY,
    "tls": ANY,
    "tlsCaFile": ANY,
    "tlsCertFile": ANY,
    "tlsKeyFile": ANY,
    "tlsInsecure": ANY,
    "tlsHostname": ANY,
    "connectTimeout": ANY,
    "requestTimeout": ANY,
    "reconnectTimeout": ANY,
    "monitorUrl": ANY,
    # writing to JetStream (target=jetstream): columns that become headers
    "msgIdColumn": WRITES,
    "expectedLastSequenceColumn": WRITES,
    "expectedLastSubjectSequenceColumn": WRITES,
}

# Keys Spark itself adds to a Python data source's options (recorded from Spark 4.3):
# load(path) / load([paths]) / save(path) / writeStream...start(path), a streaming query's
# queryName() and its checkpointLocation option. Accepted and ignored.
SPARK_OPTIONS: dict[str, frozenset[Use]] = {
    "path": ANY,
    "paths": frozenset({Use.BATCH_READ}),
    "queryName": frozenset({Use.STREAM_WRITE}),
    "checkpointLocation": frozenset({Use.STREAM_WRITE}),
}

# What to use instead of an option given where it does nothing, when that is not obvious.
_INSTEAD = {
    ("startingOffsets", Use.BATCH_READ): "batch reads use startSequence, endSequence, startTime",
}

_EVERY = {**OPTIONS, **SPARK_OPTIONS}
_NAMES = {name.lower(): name for name in _EVERY}


def _uses_text(uses: frozenset[Use]) -> str:
    if uses == ANY:
        return "reads and writes"
    if uses == READS:
        return "reads"
    if uses == WRITES:
        return "writes"
    return " and ".join(f"{use.value}s" for use in Use if use in uses)


def valid_names(*uses: Use, spark: bool = True) -> list[str]:
    """The options (as documented) that apply to at least one of `uses`; with `spark`, also
    the keys Spark adds itself."""
    table = _EVERY if spark else OPTIONS
    return [name for name, where in table.items() if where.intersection(uses)]


def applies(name: str, use: Use) -> bool:
    """Whether option `name` (any case) does something for `use`."""
    known = _NAMES.get(name.lower())
    return known is not None and use in _EVERY[known]


def check_names(options: Iterable[str], *uses: Use, spark: bool = True,
                what: str | None = None) -> None:
    """Refuse every option in `options` that applies to none of `uses`: unknown (misspelt,
    with the closest valid name) or meant for another use. `what` names the use in errors."""
    what = what or " or ".join(f"a {use.value}" for use in uses)
    own = valid_names(*uses, spark=False)
    accepted = {name.lower() for name in valid_names(*uses, spark=spark)}
    problems: list[str] = []
    unknown = False
    for key in sorted(str(k) for k in options if str(k).lower() not in accepted):
        name = _NAMES.get(key.lower())
        if name is None:
            unknown = True
            problems.append(f"unknown option {key!r} for {what}{_suggestion(key.lower(), own)}")
            continue
        instead = [_INSTEAD[name, use] for use in uses if (name, use) in _INSTEAD]
        problems.append(f"option {name} is for {_uses_text(_EVERY[name])}, not for {what}"
                        + (f" ({'; '.join(instead)})" if instead else ""))
    if problems:
        listing = f"; valid options: {', '.join(own)}" if unknown else ""
        raise OptionError("; ".join(problems) + listing)


def _suggestion(key: str, own: list[str]) -> str:
    """` (did you mean X?)` for the valid name closest to `key`, else a name meant for
    another use, else nothing."""
    for names in (own, list(OPTIONS)):
        lowered = {name.lower(): name for name in names}
        close = difflib.get_close_matches(key, list(lowered), n=1, cutoff=0.7)
        if close:
            name = lowered[close[0]]
            other = "" if name in own else f", which is for {_uses_text(OPTIONS[name])}"
            return f" (did you mean {name}{other}?)"
    return ""


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}


def _get(opts: dict[str, str], name: str, default: str = "") -> str:
    if name not in OPTIONS:  # keeps the parsers and the table (and with it the check) together
        raise KeyError(f"option {name} is not in OPTIONS")
    return opts.get(name.lower(), default).strip()


def _int(opts: dict[str, str], name: str, default: int | None, minimum: int | None = None
         ) -> int | None:
    text = _get(opts, name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f"option {name}: not an integer: {text!r}") from None
    if minimum is not None and value < minimum:
        raise OptionError(f"option {name}: must be >= {minimum}, got {value}")
    return value


def _float(opts: dict[str, str], name: str, default: float, zero_ok: bool = False) -> float:
    text = _get(opts, name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise OptionError(f"option {name}: not a number: {text!r}") from None
    if value < 0 or (value == 0 and not zero_ok) or value != value:
        raise OptionError(f"option {name}: must be {'>=' if zero_ok else '>'} 0, got {text}")
    return value


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    text = _get(opts, name).lower()
    if not text:
        return default
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise OptionError(f"option {name}: not a boolean: {text!r}")


def parse_time(text: str, name: str = "startTime") -> int:
    """A point in time as Unix nanoseconds: ISO 8601 (naive = UTC) or epoch milliseconds."""
    text = text.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text) * 1_000_000
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise OptionError(
            f"option {name}: expected ISO 8601 or epoch milliseconds, got {text!r}") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    delta = stamp - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


_CHANNEL_RE = re.compile(r"^[^\s.*>/]+(\.[^\s.*>/]+)*$")


def check_channel(name: str) -> str:
    if not _CHANNEL_RE.match(name):
        raise OptionError(f"invalid channel name {name!r}")
    return name


def check_stream(name: str) -> str:
    """A JetStream stream's name (no blank, `.`, `*`, `>` or path separator)."""
    if not name or any(c in name for c in " \t\r\n\f.*>/\\"):
        raise OptionError(f"invalid stream name {name!r}")
    return name


def split_names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


@dataclass(frozen=True)
class ConnectionOptions:
    """How to reach the streaming server. Picklable: travels to every executor."""

    servers: tuple[str, ...] = (DEFAULT_URL,)
    cluster_id: str = DEFAULT_CLUSTER_ID
    client_id_prefix: str = "spark"
    user: str | None = None
    password: str | None = None
    token: str | None = None
    creds_file: str | None = None
    nkey_seed_file: str | None = None
    tls: bool = False
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_insecure: bool = False
    tls_hostname: str | None = None
    connect_timeout: float = 5.0
    request_timeout: float = 10.0
    reconnect_timeout: float = 10.0  # how long to keep trying a server that went away
    monitor_url: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> ConnectionOptions:
        opts = _lower(options)
        servers = tuple(split_names(_get(opts, "url", DEFAULT_URL))) or (DEFAULT_URL,)
        prefix = _get(opts, "clientIdPrefix", "spark")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", prefix):
            raise OptionError("option clientIdPrefix: only letters, digits, '-' and '_'")
        cluster_id = _get(opts, "clusterId", DEFAULT_CLUSTER_ID) or DEFAULT_CLUSTER_ID
        tls = _bool(opts, "tls", any(s.startswith("tls://") for s in servers))
        tls_opts = {n: _get(opts, n) or None for n in
                    ("tlsCaFile", "tlsCertFile", "tlsKeyFile", "tlsHostname")}
        if tls_opts["tlsCaFile"] or tls_opts["tlsCertFile"]:
            tls = True
        if bool(tls_opts["tlsCertFile"]) != bool(tls_opts["tlsKeyFile"]):
            raise OptionError("options tlsCertFile and tlsKeyFile go together")
        return cls(
            servers=servers,
            cluster_id=cluster_id,
            client_id_prefix=prefix,
            user=_get(opts, "user") or None,
            password=_get(opts, "password") or None,
            token=_get(opts, "token") or None,
            creds_file=_get(opts, "credsFile") or None,
            nkey_seed_file=_get(opts, "nkeySeedFile") or None,
            tls=tls,
            tls_ca_file=tls_opts["tlsCaFile"],
            tls_cert_file=tls_opts["tlsCertFile"],
            tls_key_file=tls_opts["tlsKeyFile"],
            tls_insecure=_bool(opts, "tlsInsecure", False),
            tls_hostname=tls_opts["tlsHostname"],
            connect_timeout=_float(opts, "connectTimeout", 5.0),
            request_timeout=_float(opts, "requestTimeout", 10.0),
            reconnect_timeout=_float(opts, "reconnectTimeout", 10.0, zero_ok=True),
            monitor_url=(_get(opts, "monitorUrl") or None),
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.tls_ca_file)
        if self.tls_cert_file:
            ctx.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        if self.tls_insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def client_kwargs(self, name: str) -> dict[str, Any]:
        """Keyword arguments for `tidings.client.connect`."""
        kwargs: dict[str, Any] = {
            "name": name,
            "connect_timeout": self.connect_timeout,
            "allow_reconnect": False,
            "tls": self.ssl_context(),
        }
        if self.tls_hostname:
            kwargs["tls_hostname"] = self.tls_hostname
        for key, value in (("user", self.user), ("password", self.password),
                           ("token", self.token), ("user_credentials", self.creds_file),
                           ("nkeys_seed", self.nkey_seed_file)):
            if value:
                kwargs[key] = value
        return kwargs


@dataclass(frozen=True)
class ReadOptions:
    """What to read: channels, bounds, partitioning, flow control."""

    channels: tuple[str, ...] = ()
    channel_pattern: str | None = None
    streams: tuple[str, ...] = ()  # JetStream streams instead of channels
    stream_pattern: str | None = None
    subjects: tuple[str, ...] = ()  # a stream's messages on these subjects only
    start_sequence: int | None = None
    end_sequence: int | None = None
    start_time_ns: int | None = None
    messages_per_partition: int | None = None  # None: chosen by read path (partition_size)
    min_partitions_per_channel: int = 2
    max_in_flight: int = 100_000
    max_bytes_in_flight: int = 64 * 1024 * 1024
    ack_wait: int = 60
    batch_size: int = 10_000
    read_timeout: float = 30.0
    starting_offsets: str = "earliest"  # earliest | latest | JSON {channel: sequence}
    max_messages_per_trigger: int | None = None
    fetch: bool = True  # try the tidings bulk fetch before the subscription read
    # streams: while this file exists (where the driver runs), no new data is planned
    pause_file: str | None = None

    @property
    def kind(self) -> str:
        """What is read: "channel" (NATS Streaming) or "stream" (JetStream)."""
        return "stream" if self.streams or self.stream_pattern else "channel"

    @property
    def names(self) -> tuple[str, ...]:
        return self.streams if self.kind == "stream" else self.channels

    @property
    def pattern(self) -> str | None:
        return self.stream_pattern if self.kind == "stream" else self.channel_pattern

    def partition_size(self, fetching: bool) -> int:
        """`messagesPerPartition`, or its default: larger when the server answers bulk fetches
        (a task's fixed cost then outweighs its reading; both figures measured on 2 cores)."""
        if self.messages_per_partition is not None:
            return self.messages_per_partition
        return FETCH_PARTITION if fetching else SUBSCRIPTION_PARTITION

    @classmethod
    def parse(cls, options: Mapping[str, Any], stream: bool = False) -> ReadOptions:
        """A batch read's options, or with `stream` a streaming read's."""
        check_names(options, Use.STREAM_READ if stream else Use.BATCH_READ)
        opts = _lower(options)
        channels = tuple(check_channel(c) for c in split_names(_get(opts, "channels")))
        single = _get(opts, "channel")
        if single:
            channels = (*channels, check_channel(single))
        pattern = _get(opts, "channelPattern") or None
        streams = tuple(check_stream(s) for s in split_names(_get(opts, "streams")))
        if _get(opts, "stream"):
            streams = (*streams, check_stream(_get(opts, "stream")))
        stream_pattern = _get(opts, "streamPattern") or None
        if (channels or pattern) and (streams or stream_pattern):
            raise OptionError("options channels/channelPattern (NATS Streaming) and "
                              "streams/streamPattern (JetStream) exclude each other")
        if not (channels or pattern or streams or stream_pattern):
            raise OptionError("option channels or channelPattern (NATS Streaming), or streams "
                              "or streamPattern (JetStream), is required")
        subjects = tuple(split_names(_get(opts, "subjects")))
        if subjects and not (streams or stream_pattern):
            raise OptionError("option subjects filters a JetStream stream's messages: it "
                              "needs streams or streamPattern")
        for subject in subjects:
            if not is_valid_subject(subject):
                raise OptionError(f"option subjects: invalid subject {subject!r}")
        start_time = _get(opts, "startTime")
        start_seq = _int(opts, "startSequence", None, 1)
        end_seq = _int(opts, "endSequence", None, 1)
        if start_seq is not None and start_time:
            raise OptionError("options startSequence and startTime exclude each other")
        if start_seq is not None and end_seq is not None and end_seq < start_seq:
            raise OptionError(f"option endSequence ({end_seq}) < startSequence ({start_seq})")
        starting = _get(opts, "startingOffsets") or "earliest"
        if _get(opts, "startingOffsets") and (start_seq is not None or start_time):
            raise OptionError("option startingOffsets excludes startSequence and startTime "
                              "(they set where a stream starts too)")
        if starting.lower() in ("earliest", "latest"):
            starting = starting.lower()
        else:
            kind = "stream" if streams or stream_pattern else "channel"
            _check_offset_names(parse_offsets_json(starting, "startingOffsets"),
                                streams or channels, stream_pattern or pattern, kind)
        max_trigger = _int(opts, "maxMessagesPerTrigger", None, 1)
        return cls(
            channels=tuple(dict.fromkeys(channels)),
            channel_pattern=pattern,
            streams=tuple(dict.fromkeys(streams)),
            stream_pattern=stream_pattern,
            subjects=subjects,
            start_sequence=start_seq,
            end_sequence=end_seq,
            start_time_ns=parse_time(start_time) if start_time else None,
            messages_per_partition=_int(opts, "messagesPerPartition", None, 1),
            min_partitions_per_channel=_int(opts, "minPartitionsPerChannel", 2, 1) or 2,
            max_in_flight=_int(opts, "maxInFlight", 100_000, 1) or 100_000,
            max_bytes_in_flight=(_int(opts, "maxBytesInFlight", 64 * 1024 * 1024, 1)
                                 or 64 * 1024 * 1024),
            ack_wait=_int(opts, "ackWait", 60, 1) or 60,
            batch_size=_int(opts, "batchSize", 10_000, 1) or 10_000,
            read_timeout=_float(opts, "readTimeout", 30.0),
            starting_offsets=starting,
            max_messages_per_trigger=max_trigger,
            fetch=_bool(opts, "fetch", True),
            pause_file=_get(opts, "pauseFile") or None,
        )


def _check_offset_names(offsets: dict[str, int], names: tuple[str, ...],
                        pattern: str | None, kind: str) -> None:
    """A channel (or stream) in startingOffsets that the query does not read is a mistake."""
    stray = [name for name in offsets if name not in names
             and not (pattern and name_matches(pattern, name))]
    if stray:
        among = f"{kind}s ({', '.join(names) or 'none'})"
        if pattern:
            among += f" nor matching {kind}Pattern {pattern}"
        raise OptionError(f"option startingOffsets: {', '.join(map(repr, stray))} "
                          f"not among {among}")


def parse_offsets_json(text: str, name: str) -> dict[str, int]:
    try:
        value = json.loads(text)
    except ValueError:
        raise OptionError(
            f"option {name}: 'earliest', 'latest' or JSON {{channel or stream: sequence}}"
        ) from None
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in value.items()):
        raise OptionError(f"option {name}: JSON must map channel or stream names to "
                          "sequences >= 0")
    return value


@dataclass(frozen=True)
class WriteOptions:
    """Where rows go: streaming channels or JetStream streams (acknowledged), or core NATS
    subjects; for JetStream, the columns that become a message's `Nats-Msg-Id` and
    `Nats-Expected-*` headers."""

    target: str = "streaming"  # streaming | jetstream | core
    subject: str | None = None  # used when the rows have no subject column
    pub_ack_wait: float = 30.0
    max_pub_acks_in_flight: int = 16_384
    msg_id_column: str | None = None  # jetstream: Nats-Msg-Id
    expected_last_sequence_column: str | None = None  # Nats-Expected-Last-Sequence
    expected_last_subject_sequence_column: str | None = None  # ...-Last-Subject-Sequence

    @property
    def header_columns(self) -> dict[str, str]:
        """Header name -> the column its value comes from (jetstream)."""
        pairs = (("Nats-Msg-Id", self.msg_id_column),
                 ("Nats-Expected-Last-Sequence", self.expected_last_sequence_column),
                 ("Nats-Expected-Last-Subject-Sequence",
                  self.expected_last_subject_sequence_column))
        return {header: column for header, column in pairs if column}

    @classmethod
    def parse(cls, options: Mapping[str, Any], stream: bool = False) -> WriteOptions:
        """A batch write's options, or with `stream` a streaming write's."""
        check_names(options, Use.STREAM_WRITE if stream else Use.BATCH_WRITE)
        opts = _lower(options)
        target = (_get(opts, "target", "streaming") or "streaming").lower()
        if target not in TARGETS:
            raise OptionError(f"option target: 'streaming', 'jetstream' or 'core', got "
                              f"{target!r}")
        columns = {name: _get(opts, name) or None for name in _JETSTREAM_COLUMNS}
        given = [name for name, column in columns.items() if column]
        if given and target != "jetstream":
            raise OptionError(f"option {given[0]} sets a JetStream header: it needs "
                              "target=jetstream")
        return cls(
            target=target,
            subject=_get(opts, "subject") or None,
            pub_ack_wait=_float(opts, "pubAckWait", 30.0),
            max_pub_acks_in_flight=_int(opts, "maxPubAcksInFlight", 16_384, 1) or 16_384,
            msg_id_column=columns["msgIdColumn"],
            expected_last_sequence_column=columns["expectedLastSequenceColumn"],
            expected_last_subject_sequence_column=columns["expectedLastSubjectSequenceColumn"],
        )


TARGETS = ("streaming", "jetstream", "core")
_JETSTREAM_COLUMNS = ("msgIdColumn", "expectedLastSequenceColumn",
                      "expectedLastSubjectSequenceColumn")
