"""The NATS Streaming server of tidings.

It is a NATS client of a core server (tidings' own, in the same process, or any NATS server
given by URL), exactly as the reference nats-streaming-server: see :mod:`.server` for the
protocol state machine, :mod:`.options` for flags and limits, :mod:`.monitor` for the HTTP
endpoints and :mod:`.runner` to start it.
"""

from __future__ import annotations

from .options import StreamingOptions, add_streaming_arguments, options_from_args
from .runner import RunningStreaming, run_standalone, start_embedded, start_streaming
from .server import StreamingServer

__all__ = [
    "RunningStreaming",
    "StreamingOptions",
    "StreamingServer",
    "add_streaming_arguments",
    "options_from_args",
    "run_standalone",
    "start_embedded",
    "start_streaming",
]
