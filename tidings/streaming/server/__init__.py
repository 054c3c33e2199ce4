"""The NATS Streaming server of tidings.

It is a NATS client of a core server (tidings' own, in the same process, or any NATS server
given by URL), exactly as the reference nats-streaming-server: see :mod:`.server` for the
protocol state machine, :mod:`.options` for flags and limits, :mod:`.monitor` for the HTTP
endpoints and :mod:`.runner` to start it.

The names below are imported when first used: `tidings server` reads the streaming flags
(`.options`) at every start, and should not pay for the server, protobuf and the client
until streaming actually starts.
"""

from __future__ import annotations

from ...lazy import lazy_names

_WHERE = {
    "RunningStreaming": ".runner",
    "run_standalone": ".runner",
    "start_embedded": ".runner",
    "start_streaming": ".runner",
    "StreamingOptions": ".options",
    "add_streaming_arguments": ".flags",
    "options_from_args": ".options",
    "StreamingServer": ".server",
}

__all__ = sorted(_WHERE)


__getattr__ = lazy_names(__name__, _WHERE, globals())
