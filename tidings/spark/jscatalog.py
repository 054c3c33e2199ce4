"""What the driver needs to know about JetStream streams: their sequence bounds, which exist
(`streamPattern`, through `$JS.API.STREAM.NAMES`: no monitoring endpoint needed), where a
time falls, and how each stream's ranges are read (jsread.method_for: direct gets, an ordered
consumer or message gets), which travels to the executors with each partition.

A stream that does not exist is an error naming it (a batch read of it, or a stream deleted
under a running query), and so is one made again under a running query (its creation time
changed); one that holds nothing plans no partition.
"""

from __future__ import annotations

from typing import Any

from . import jetstream
from .catalog import DriverLink
from .connection import ConnectorError, NatsConnection
from .jsread import method_for
from .options import ConnectionOptions, ReadOptions
from .stan import ChannelInfo

STREAM_PARTITION = 250_000  # default messagesPerPartition of a stream


class StreamCatalog(DriverLink):
    """JetStream streams: the catalog of the `nats` source's stream backend."""

    def __init__(self, copts: ConnectionOptions, role: str = "d") -> None:
        super().__init__(copts, role)
        self.methods: dict[str, str] = {}
        self.known: dict[str, jetstream.StreamBounds] = {}  # the bounds asked last, by name

    def _new_connection(self, lost: Any) -> NatsConnection:
        return NatsConnection(self.copts, self.role)

    def _bounds(self, streams: list[str] | tuple[str, ...]) -> dict[str, jetstream.StreamBounds]:
        timeout = self.copts.request_timeout

        async def ask(conn: NatsConnection) -> dict[str, jetstream.StreamBounds]:
            return {name: await jetstream.bounds(conn.nc, name, timeout)  # type: ignore[arg-type]
                    for name in streams}

        out: dict[str, jetstream.StreamBounds] = self._run(ask)
        for name, b in out.items():
            was = self.known.get(name)
            if was is not None and was.created and b.created != was.created:
                raise ConnectorError(
                    f"stream {name!r} was deleted and created again under the query (created "
                    f"{b.created}, before {was.created}): its sequences are not those the "
                    "query's offsets count; start the query again with a new checkpoint, or "
                    "startingOffsets")
        self.known.update(out)
        for name, b in out.items():
            self.methods[name] = method_for(b.direct, b.retention)
            if b.messages:
                self.sizes[name] = b.msg_size
        return out

    def info(self, streams: list[str] | tuple[str, ...]) -> dict[str, ChannelInfo | None]:
        """{stream: (first, last, message size), or None when it holds nothing}."""
        return {name: ChannelInfo(b.first, b.last, b.msg_size) if b.messages else None
                for name, b in self._bounds(streams).items()}

    def last_sequences(self, streams: list[str] | tuple[str, ...]) -> dict[str, int]:
        """{stream: its last sequence (also when it holds nothing now)}."""
        return {name: b.last for name, b in self._bounds(streams).items()}

    def first_at_or_after(self, streams: list[str] | tuple[str, ...], time_ns: int
                          ) -> dict[str, int | None]:
        unknown = [name for name in streams if name not in self.known]
        bounds = {**self.known, **(self._bounds(unknown) if unknown else {})}
        timeout = self.copts.request_timeout

        async def ask(conn: NatsConnection) -> dict[str, int | None]:
            return {name: await jetstream.first_at_or_after(
                conn.nc, name, time_ns, bounds[name].direct, timeout)  # type: ignore[arg-type]
                for name in streams}

        return self._run(ask)  # type: ignore[no-any-return]

    def discover(self, pattern: str) -> list[str]:
        timeout = self.copts.request_timeout

        async def ask(conn: NatsConnection) -> list[str]:
            return await jetstream.names(conn.nc, pattern, timeout)  # type: ignore[arg-type]

        return self._run(ask)  # type: ignore[no-any-return]

    def partitioning(self, ropts: ReadOptions, params: Any) -> tuple[int, Any]:
        return ropts.messages_per_partition or STREAM_PARTITION, params

    def hint(self, name: str) -> str:
        """How `name`'s ranges are read (known once its bounds were asked)."""
        return self.methods.get(name, "")
