"""Options of the `nats` data source, parsed once on the driver into plain picklable values.

Spark hands a Python data source its options as strings under lower-cased names
(`option("startSequence", 5)` arrives as `{"startsequence": "5"}`), so every lookup here is by
the lower-cased name and every value is converted from text. Errors name the option as the user
wrote it.
"""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

DEFAULT_URL = "nats://127.0.0.1:4222"
DEFAULT_CLUSTER_ID = "test-cluster"
SUBSCRIPTION_PARTITION = 50_000  # default messagesPerPartition, subscription reads
FETCH_PARTITION = 250_000  # default messagesPerPartition when the server answers fetches


class OptionError(ValueError):
    """An option of the `nats` data source has a bad value."""


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}


def _get(opts: dict[str, str], name: str, default: str = "") -> str:
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

    def partition_size(self, fetching: bool) -> int:
        """`messagesPerPartition`, or its default: larger when the server answers bulk fetches
        (a task's fixed cost then outweighs its reading; both figures measured on 2 cores)."""
        if self.messages_per_partition is not None:
            return self.messages_per_partition
        return FETCH_PARTITION if fetching else SUBSCRIPTION_PARTITION

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> ReadOptions:
        opts = _lower(options)
        channels = tuple(check_channel(c) for c in split_names(_get(opts, "channels")))
        single = _get(opts, "channel")
        if single:
            channels = (*channels, check_channel(single))
        pattern = _get(opts, "channelPattern") or None
        if not channels and not pattern:
            raise OptionError("option channels (comma-separated) or channelPattern is required")
        start_time = _get(opts, "startTime")
        start_seq = _int(opts, "startSequence", None, 1)
        end_seq = _int(opts, "endSequence", None, 1)
        if start_seq is not None and start_time:
            raise OptionError("options startSequence and startTime exclude each other")
        if start_seq is not None and end_seq is not None and end_seq < start_seq:
            raise OptionError(f"option endSequence ({end_seq}) < startSequence ({start_seq})")
        starting = _get(opts, "startingOffsets", "earliest") or "earliest"
        if starting.lower() in ("earliest", "latest"):
            starting = starting.lower()
        else:
            parse_offsets_json(starting, "startingOffsets")
        max_trigger = _int(opts, "maxMessagesPerTrigger", None, 1)
        return cls(
            channels=tuple(dict.fromkeys(channels)),
            channel_pattern=pattern,
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
        )


def parse_offsets_json(text: str, name: str) -> dict[str, int]:
    try:
        value = json.loads(text)
    except ValueError:
        raise OptionError(
            f"option {name}: 'earliest', 'latest' or JSON {{channel: sequence}}") from None
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in value.items()):
        raise OptionError(f"option {name}: JSON must map channel names to sequences >= 0")
    return value


@dataclass(frozen=True)
class WriteOptions:
    """Where rows go: streaming channels (PubAck'ed) or core NATS subjects."""

    target: str = "streaming"  # streaming | core
    subject: str | None = None  # used when the rows have no subject column
    pub_ack_wait: float = 30.0
    max_pub_acks_in_flight: int = 16_384

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> WriteOptions:
        opts = _lower(options)
        target = (_get(opts, "target", "streaming") or "streaming").lower()
        if target not in ("streaming", "core"):
            raise OptionError(f"option target: 'streaming' or 'core', got {target!r}")
        return cls(
            target=target,
            subject=_get(opts, "subject") or None,
            pub_ack_wait=_float(opts, "pubAckWait", 30.0),
            max_pub_acks_in_flight=_int(opts, "maxPubAcksInFlight", 16_384, 1) or 16_384,
        )
