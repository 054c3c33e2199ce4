"""Options of the streaming server: defaults and flags of the reference, and its config file.

Flags keep the reference nats-streaming-server's names (``--cluster_id``, ``--store``,
``--dir``, ``--max_channels``, ``--max_msgs``, ``--max_bytes``, ``--max_age``, ``--max_subs``,
``--max_inactivity``, ``--hb_interval``, ``--hb_timeout``, ``--hb_fail_count``,
``--stan_config``, ``--file_sync``, ``--sql_driver``, ``--sql_source``), so scripts written
for the reference keep working. Per-channel limits come from the config file
(``store_limits { channels { "foo.*": { max_msgs: 10 } } }``), in the reference's syntax
(the NATS configuration format) or JSON.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ... import config
from ...config.units import file_duration, file_size, flag_bool
from ...oserrors import about
from ...protocol.subjects import subject_matches
from ..stores import ChannelLimits, StoreError, StoreLimits
from .flags import (  # noqa: F401  (the flags' names, also known from here)
    DEFAULT_CLUSTER_ID,
    SQL_DRIVERS,
    STORE_TYPES,
    SYNC_POLICIES,
    add_streaming_arguments,
)

DEFAULT_DISCOVER_PREFIX = "_STAN.discover"
DEFAULT_PUB_PREFIX = "_STAN.pub"
DEFAULT_SUB_PREFIX = "_STAN.sub"
DEFAULT_SUB_CLOSE_PREFIX = "_STAN.subclose"
DEFAULT_UNSUB_PREFIX = "_STAN.unsub"
DEFAULT_CLOSE_PREFIX = "_STAN.close"
DEFAULT_ACKS_PREFIX = "_STAN.ack"



@dataclass
class StreamingOptions:
    """Everything the streaming server needs; defaults are the reference's."""

    cluster_id: str = DEFAULT_CLUSTER_ID
    discover_prefix: str = DEFAULT_DISCOVER_PREFIX
    store: str = "memory"
    dir: str = ""
    sql_driver: str = "sqlite"
    sql_source: str = ""
    sync_policy: str = "batch"
    sync_interval: float = 1.0
    # file store: truncate a damaged record and everything after it on recovery
    truncate_bad_eof: bool = False
    limits: StoreLimits = field(default_factory=StoreLimits)
    max_inactivity: float = 0.0
    channel_inactivity: dict[str, float] = field(default_factory=dict)
    hb_interval: float = 30.0
    hb_timeout: float = 10.0
    hb_fail_count: int = 10
    dup_cid_timeout: float = 0.5
    nats_url: str = ""
    nats_user: str = ""
    nats_password: str = ""
    nats_token: str = ""
    http_host: str = "0.0.0.0"
    http_port: int = 0
    max_pending_pub_acks: int = 1_000_000
    # fault-tolerance group (``--ft_group``): standby until the group's active server stops
    ft_group: str = ""

    def inactivity_for(self, channel: str) -> float:
        """Max inactivity of a channel (seconds, 0 = never deleted)."""
        if channel in self.channel_inactivity:
            return self.channel_inactivity[channel]
        for pattern, value in self.channel_inactivity.items():
            if subject_matches(pattern, channel):
                return value
        return self.max_inactivity


def _bool(value: Any) -> bool:
    """A boolean of the file: the parser's, or a flag's word in a string ("true", "1")."""
    return value if isinstance(value, bool) else flag_bool(str(value))


def _channel_limits(d: dict[str, Any]) -> tuple[ChannelLimits, float | None]:
    """A reference per-channel limits map: 0 inherits the global value, < 0 is unlimited."""

    def pick(key: str, *aliases: str, conv: Any = int) -> Any:
        for k in (key, *aliases):
            if k in d:
                v = conv(d[k])
                if v == 0:
                    return None
                return 0 if v < 0 else v
        return None

    limits = ChannelLimits(
        max_msgs=pick("max_msgs", "max_messages"),
        max_bytes=pick("max_bytes", conv=file_size),
        max_age=pick("max_age", conv=file_duration),
        max_subs=pick("max_subs", "max_subscriptions"),
    )
    inactivity = pick("max_inactivity", conv=file_duration)
    return limits, inactivity


def apply_config(opts: StreamingOptions, conf: dict[str, Any]) -> StreamingOptions:
    """Options updated from a parsed reference streaming config (top level or `streaming {}`)."""
    if isinstance(conf.get("streaming"), dict):
        conf = conf["streaming"]
    o = replace(opts)
    for key in ("id", "cluster_id", "cid"):
        if key in conf:
            o.cluster_id = str(conf[key])
    if "discover_prefix" in conf:
        o.discover_prefix = str(conf["discover_prefix"])
    for key in ("store", "store_type", "st"):
        if key in conf:
            o.store = str(conf[key]).lower()
    for key in ("dir", "datastore"):
        if key in conf:
            o.dir = str(conf[key])
    if "hb_interval" in conf:
        o.hb_interval = file_duration(conf["hb_interval"])
    if "hb_timeout" in conf:
        o.hb_timeout = file_duration(conf["hb_timeout"])
    if "hb_fail_count" in conf:
        o.hb_fail_count = int(conf["hb_fail_count"])
    for key in ("ft_group", "ft_group_name"):
        if key in conf:
            o.ft_group = str(conf[key])
    for key in ("nats_server_url", "ns", "nats_server"):
        if key in conf:
            o.nats_url = str(conf[key])
    sql = conf.get("sql_options") or conf.get("sql")
    if isinstance(sql, dict):
        if "driver" in sql:
            o.sql_driver = "postgres" if "postgres" in str(sql["driver"]) else str(sql["driver"])
        if "source" in sql:
            o.sql_source = str(sql["source"])
    fopts = conf.get("file_options") or conf.get("file")
    if isinstance(fopts, dict) and "sync_on_flush" in fopts:
        o.sync_policy = "batch" if _bool(fopts["sync_on_flush"]) else "never"
    lim = conf.get("store_limits") or conf.get("limits")
    if isinstance(lim, dict):
        base = o.limits
        changes: dict[str, Any] = {}
        if "max_channels" in lim:
            changes["max_channels"] = int(lim["max_channels"])
        if "max_msgs" in lim:
            changes["max_msgs"] = int(lim["max_msgs"])
        if "max_bytes" in lim:
            changes["max_bytes"] = file_size(lim["max_bytes"])
        if "max_age" in lim:
            changes["max_age"] = file_duration(lim["max_age"])
        for key in ("max_subs", "max_subscriptions"):
            if key in lim:
                changes["max_subs"] = int(lim[key])
        if "max_inactivity" in lim:
            o.max_inactivity = file_duration(lim["max_inactivity"])
        chans = lim.get("channels")
        if isinstance(chans, dict):
            per: dict[str, ChannelLimits] = dict(base.channels)
            inact = dict(o.channel_inactivity)
            for name, cl in chans.items():
                if not isinstance(cl, dict):
                    raise ValueError(f"config: limits of channel {name!r} must be a map")
                per[name], ina = _channel_limits(cl)
                if ina is not None:
                    inact[name] = ina
            changes["channels"] = per
            o.channel_inactivity = inact
        o.limits = replace(base, **changes)
    return o


def load_config(path: str | Path, opts: StreamingOptions) -> StreamingOptions:
    return apply_config(opts, config.load(path))


# --- command line ------------------------------------------------------------------------

def options_from_args(
    args: argparse.Namespace, base: StreamingOptions | None = None
) -> StreamingOptions:
    """Streaming options from parsed flags: `base` (the defaults, or the `streaming {}` block
    of the server's configuration file), then a -sc config file, then the flags over it."""
    o = base or StreamingOptions()
    conf = getattr(args, "stan_config", "")
    if conf:
        o = load_config(conf, o)
    o.cluster_id = args.cluster_id if args.cluster_id != DEFAULT_CLUSTER_ID else o.cluster_id
    if args.store:
        o.store = args.store
    if args.dir:
        o.dir = args.dir
    lim_changes: dict[str, Any] = {}
    for key in ("max_channels", "max_subs", "max_msgs", "max_bytes", "max_age"):
        v = getattr(args, key, None)
        if v is not None:
            lim_changes[key] = v
    if lim_changes:
        o.limits = replace(o.limits, **lim_changes)
    if args.max_inactivity is not None:
        o.max_inactivity = args.max_inactivity
    if args.hb_interval is not None:
        o.hb_interval = args.hb_interval
    if args.hb_timeout is not None:
        o.hb_timeout = args.hb_timeout
    if args.hb_fail_count is not None:
        o.hb_fail_count = args.hb_fail_count
    if args.file_sync is not None:
        o.sync_policy = "batch" if args.file_sync else "never"
    if args.sync_policy is not None:
        o.sync_policy = args.sync_policy
    if args.sync_interval is not None:
        o.sync_interval = args.sync_interval
    if args.file_truncate_bad_eof is not None:
        o.truncate_bad_eof = args.file_truncate_bad_eof
    if args.sql_driver is not None:
        o.sql_driver = args.sql_driver
    if args.sql_source is not None:
        o.sql_source = args.sql_source
    if getattr(args, "ft_group", None):
        o.ft_group = args.ft_group
    if getattr(args, "nats", None):
        o.nats_url = args.nats
        o.nats_user = getattr(args, "user", "") or ""
        o.nats_password = getattr(args, "password", "") or ""
        o.nats_token = getattr(args, "token", "") or ""
    if getattr(args, "http_port", 0):
        o.http_port = args.http_port
        o.http_host = getattr(args, "http_host", o.http_host)
    return o


def open_store_for(opts: StreamingOptions) -> Any:
    """Open the store the options ask for."""
    from ..stores import open_store

    kind = opts.store
    if kind == "memory":
        return open_store("memory", limits=opts.limits)
    if kind == "file":
        if not opts.dir:
            raise ValueError("the file store needs a directory (--dir)")
        try:
            return open_store(
                "file", path=opts.dir, limits=opts.limits, sync=opts.sync_policy,
                sync_interval=opts.sync_interval, truncate_corrupt=opts.truncate_bad_eof,
            )
        except OSError as exc:
            raise about("streaming store directory", opts.dir, exc) from exc
    if kind == "sql":
        if opts.sql_driver == "postgres":
            if not opts.sql_source:
                raise ValueError("the postgres store needs --sql_source DSN")
            import psycopg

            try:
                return open_store("postgres", dsn=opts.sql_source, limits=opts.limits,
                                  sync=opts.sync_policy)
            except psycopg.Error as exc:
                raise StoreError(f"cannot open the postgres store: {exc}") from exc
        source = opts.sql_source
        if not source:
            if not opts.dir:
                raise ValueError("the sqlite store needs --sql_source FILE or --dir DIR")
            try:
                Path(opts.dir).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise about("streaming store directory", opts.dir, exc) from exc
            source = str(Path(opts.dir) / "streaming.db")
        import sqlite3

        try:
            return open_store("sqlite", path=source, limits=opts.limits, sync=opts.sync_policy)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the sqlite store {source}: {exc}") from exc
    raise ValueError(f"unknown store type {kind!r}")
