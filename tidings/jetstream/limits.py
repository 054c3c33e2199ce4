"""JetStream's limits on an account's streams and consumers (its `jetstream { }` map in the
configuration) and on the server (`max_memory_store`, `max_file_store`): what a stream
create reserves, what a publish may add, what a consumer may ask for, with the reference's
refusals."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..config.accounts import JetStreamLimits
from . import errors
from .consumer_config import DEFAULT_MAX_ACK_PENDING

NO_LIMITS = JetStreamLimits()
ZERO_LIMITS = JetStreamLimits(0, 0, 0, 0, 0, 0, 0).as_json()  # (a tiered account's top level)


def usage(streams: Iterable[Any], storage: str) -> int:
    """Bytes the streams of one storage type hold."""
    return sum(s.store.bytes for s in streams if s.config["storage"] == storage)


def reserved(streams: Iterable[Any], storage: str, leaving: str = "") -> int:
    """Bytes the streams of one storage type reserve (their max_bytes), but `leaving`'s."""
    return sum(s.config["max_bytes"] for s in streams if s.config["storage"] == storage
               and s.config["max_bytes"] > 0 and s.name != leaving)


def check_stream(limits: JetStreamLimits, config: dict[str, Any], mine: dict[str, Any],
                 everyone: Iterable[Any], server_max: dict[str, int], creating: bool) -> None:
    """A stream configuration against the account's limits (`mine`: the account's streams
    by name) and the server's (`everyone`: every account's streams), as the reference
    checks a create: the number of streams, max_consumers, what max_bytes reserves, and
    max_bytes itself."""
    if creating and limits.max_streams > 0 and len(mine) >= limits.max_streams:
        raise errors.MAXIMUM_STREAMS_LIMIT()
    if 0 < limits.max_consumers < config["max_consumers"]:
        raise errors.MAXIMUM_CONSUMERS_LIMIT()
    storage = config["storage"]
    exceeded = errors.MEMORY_RESOURCES_EXCEEDED if storage == "memory" \
        else errors.STORAGE_RESOURCES_EXCEEDED
    adding = max(config["max_bytes"], 1)
    account_max = limits.max_memory if storage == "memory" else limits.max_storage
    taken = reserved(mine.values(), storage, config["name"])
    if account_max >= 0 and (taken > account_max or adding > account_max - taken):
        raise exceeded()
    server = server_max[storage]
    taken = reserved(everyone, storage, config["name"])
    if server >= 0 and (taken > server or adding > server - taken):
        raise exceeded()
    stream_max = limits.memory_max_stream_bytes if storage == "memory" \
        else limits.storage_max_stream_bytes
    if limits.max_bytes_required and config["max_bytes"] <= 0:
        raise errors.STREAM_MAX_BYTES_REQUIRED()
    if stream_max > 0 and config["max_bytes"] > stream_max:
        raise errors.STREAM_MAX_STREAM_BYTES_EXCEEDED()


def check_publish(limits: JetStreamLimits, streams: Iterable[Any], storage: str,
                  size: int) -> None:
    """A message of `size` bytes to a stream of `storage`: refused when the account's
    streams of that storage would hold more than its limit."""
    account_max = limits.max_memory if storage == "memory" else limits.max_storage
    if account_max >= 0 and usage(streams, storage) + size > account_max:
        raise errors.ACCOUNT_RESOURCES_EXCEEDED()


def check_consumer(limits: JetStreamLimits, config: dict[str, Any], stream: Any,
                   given_ack_pending: bool) -> None:
    """A new consumer of `stream` against its limits: the number of consumers (the
    stream's max_consumers, or the account's when lower), and max_ack_pending (the
    account's when the configuration gave none)."""
    most = stream.config.get("max_consumers", -1)
    if most <= 0 or 0 < limits.max_consumers < most:
        most = limits.max_consumers
    if most > 0 and len(stream.consumers) >= most:
        raise errors.MAXIMUM_CONSUMERS_LIMIT()
    if config["ack_policy"] == "none" or limits.max_ack_pending <= 0:
        return
    if not given_ack_pending:
        config["max_ack_pending"] = min(DEFAULT_MAX_ACK_PENDING, limits.max_ack_pending)
    if config["max_ack_pending"] > limits.max_ack_pending:
        raise errors.CONSUMER_MAX_PENDING_ACK_EXCESS(limit=limits.max_ack_pending)
