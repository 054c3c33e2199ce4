"""The streaming server's command-line flags, named as the reference nats-streaming-server's.

Kept apart from the options (options.py) and light to import: `tidings server` defines
these flags at every start, also with --no_streaming, and should not load the stores for it.
Their units are tidings.config.units' flag grammars: --max_bytes a size as the configuration
file writes it (as the reference's getBytes reads it: `1k` 1000, `1KB` 1024), the durations
Go's (and seconds, days), booleans Go's words (and yes/no, on/off).
"""

from __future__ import annotations

from typing import Any

from ...config.units import flag_bool, flag_duration, flag_monitor_port, flag_size
from .. import defaults

DEFAULT_CLUSTER_ID = "test-cluster"
STORE_TYPES = ("memory", "file", "sql")
SQL_DRIVERS = ("sqlite", "postgres")
SYNC_POLICIES = ("batch", "interval", "never")


def add_streaming_arguments(group: Any, standalone: bool = False) -> None:
    """The reference's streaming flags. With ``standalone`` also --nats and monitoring."""
    add = group.add_argument
    add("-cid", "--cluster_id", default=DEFAULT_CLUSTER_ID,
        help="streaming cluster id (default %(default)s)")
    add("-st", "--store", type=str.lower, choices=STORE_TYPES, default=None,
        help="streaming store: memory, file or sql (default memory)")
    add("--dir", default="", help="directory of the file store (and of a sqlite database)")
    add("-sc", "--stan_config", default="", metavar="FILE",
        help="streaming config file (the reference's format, or JSON): limits per channel")
    add("-mc", "--max_channels", type=int, default=None,
        help=f"max number of channels, 0 for unlimited (default {defaults.MAX_CHANNELS})")
    add("-msu", "--max_subs", type=int, default=None,
        help=f"max subscriptions per channel, 0 for unlimited (default {defaults.MAX_SUBS})")
    add("-mm", "--max_msgs", type=int, default=None,
        help=f"max messages per channel, 0 for unlimited (default {defaults.MAX_MSGS})")
    add("-mb", "--max_bytes", type=flag_size, default=None,
        help=f"max bytes per channel, 0 for unlimited (default {defaults.MAX_BYTES})")
    add("-ma", "--max_age", type=flag_duration, default=None,
        help="max age of messages, e.g. 24h; 0 for unlimited (default 0)")
    add("-mi", "--max_inactivity", type=flag_duration, default=None,
        help="delete a channel without subscriptions or new messages after this; 0 = never")
    add("-hbi", "--hb_interval", type=flag_duration, default=None,
        help="interval of heartbeats to clients (default 30s)")
    add("-hbt", "--hb_timeout", type=flag_duration, default=None,
        help="how long to wait for a heartbeat reply (default 10s)")
    add("-hbf", "--hb_fail_count", type=int, default=None,
        help="failed heartbeats before a client is closed (default 10)")
    add("--file_sync", type=flag_bool, default=None, metavar="BOOL",
        help="fsync the file store before PubAcks (default true)")
    add("--sync_policy", choices=SYNC_POLICIES, default=None,
        help="file/sql store durability: batch (fsync per group commit, default), "
             "interval (at most every --sync_interval) or never")
    add("--file_truncate_bad_eof", type=flag_bool, default=None, metavar="BOOL",
        help="file store recovery: truncate a file at a damaged record even when valid "
             "records follow it (they are lost); by default the server stops")
    add("--sync_interval", type=flag_duration, default=None,
        help="seconds between fsyncs under --sync_policy interval (default 1s)")
    add("--sql_driver", type=str.lower, choices=SQL_DRIVERS, default=None,
        help="sql store: sqlite or postgres (default sqlite)")
    add("--sql_source", default=None,
        help="sql store: sqlite file (default DIR/streaming.db) or a postgres DSN")
    add("--ft_group", default=None, metavar="NAME",
        help="name of the fault-tolerance group: start in standby and become active when "
             "the group's active server stops (file or sql store shared by the group)")
    if standalone:
        add("-ns", "--nats", "--nats_server", dest="nats", default="nats://127.0.0.1:4222",
            help="URL of the NATS server to use (default %(default)s)")
        add("--user", default="", help="user for the NATS server")
        add("--pass", dest="password", default="", help="password for the NATS server")
        add("--auth", dest="token", default="", help="token for the NATS server")
        add("-m", "--http_port", type=flag_monitor_port, default=0,
            help="HTTP port for the /streaming monitoring endpoints (default off; -1: any "
                 "free port)")
        add("--http_host", default="0.0.0.0", help="HTTP host for monitoring")
