"""Service latency tracking: what a service export with `latency { sampling, subject }`
publishes in the exporting account for a sampled request once its response comes back
(the reference's io.nats.server.metric.v1.service_latency, a Singleton service's only).

Sampling is a percentage of requests, or "headers" (stored as -1): the requester's
tracing headers decide (a W3C `traceparent` with the sampled flag, B3's `X-B3-Sampled: 1`,
`X-B3-TraceId` or a `b3` header not saying 0, an `uber-trace-id` with the sampled flag), as
the reference's shouldSample decides.
"""

from __future__ import annotations

import random
import secrets
import time
from typing import TYPE_CHECKING, Any

from ..protocol.headers import header_fields
from .clientinfo import client_info, go_time

if TYPE_CHECKING:
    from ..config.accounts import Latency
    from .connection import Connection

METRIC_TYPE = "io.nats.server.metric.v1.service_latency"
HEADERS = -1


def sampled(latency: Latency | None, headers: bytes | None) -> bool:
    """Whether a request is measured."""
    if latency is None:
        return False
    if latency.sampling >= 100:
        return True
    if latency.sampling > 0:
        return random.randrange(100) < latency.sampling
    return latency.sampling == HEADERS and headers is not None and _trace_says_sample(headers)


def _trace_says_sample(headers: bytes) -> bool:
    fields = header_fields(headers)
    if uber := fields.get("uber-trace-id"):
        flags = uber.split(":")
        return len(flags) == 4 and 0 < len(flags[3]) <= 2 and _odd_hex(flags[3])
    if (flag := fields.get("x-b3-sampled")) is not None:
        return flag == "1"
    if "x-b3-traceid" in fields:
        return True
    if (b3 := fields.get("b3")) is not None:
        parts = b3.split("-")
        return not ((len(parts) > 2 and parts[2] == "0") or parts == ["0"])
    if parent := fields.get("traceparent"):
        parts = parent.split("-")
        return len(parts) == 4 and len(parts[3]) == 2 and _odd_hex(parts[3])
    return False


def _odd_hex(text: str) -> bool:
    try:
        return int(text, 16) & 1 == 1
    except ValueError:
        return False


class Measure:
    """A sampled request: who asked, when, and whether its details are shared."""

    __slots__ = ("requestor", "started", "share")

    def __init__(self, requestor: Connection | None, share: bool) -> None:
        self.requestor = requestor
        self.started = time.time()
        self.share = share

    def metric(self, responder: Connection | None, event_id: str = "") -> dict[str, Any]:
        """The metric, now that the response has come from `responder`."""
        now = time.time()
        service_rtt = now - self.started
        requestor = self.requestor
        req = (client_info(requestor, self.share, where=self.share)  # type: ignore[arg-type]
               if requestor is not None and not requestor.is_route else None)
        resp = (client_info(responder, True, where=True)  # type: ignore[arg-type]
                if responder is not None and not responder.is_route else None)
        req_rtt = requestor.rtt if req is not None and requestor is not None else 0.0
        resp_rtt = responder.rtt if resp is not None and responder is not None else 0.0
        body: dict[str, Any] = {"type": METRIC_TYPE, "id": event_id or secrets.token_hex(11),
                                "timestamp": go_time(now), "status": 200}
        if req is not None:
            body["requestor"] = req
        if resp is not None:
            body["responder"] = resp
        system = time.time() - now if resp_rtt > 0 else 0.0
        body.update(start=go_time(self.started - req_rtt),
                    service=max(0, int((service_rtt - resp_rtt) * 1e9)),
                    system=max(0, int(system * 1e9)),
                    total=int((req_rtt + service_rtt + system) * 1e9))
        return body
