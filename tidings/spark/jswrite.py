"""Writing rows to JetStream streams (`target=jetstream`), on any JetStream server.

Each row is a core NATS publish to its subject with a reply subject of the task's own
(`<inbox>.<row number>`): JetStream answers it there with a PubAck (`{"stream", "seq"}`,
`"duplicate": true` for a message id already in the stream's duplicate window: written
before), an error PubAck (`{"error": {...}}`: a `Nats-Expected-*` mismatch, a full stream
that discards new messages, a message over the stream's max_msg_size, ...), or, when no stream
takes the subject, the server's 503 no-responders status. `AckedPublisher` (publishing.py)
keeps the window, fails the task on a refusal and publishes the unanswered rows again on a
new connection when one is lost.

Headers: the `headers` column (map<string,string> or map<string,array<string>>), and the
columns named by `msgIdColumn` (`Nats-Msg-Id`), `expectedLastSequenceColumn` and
`expectedLastSubjectSequenceColumn` (`Nats-Expected-Last-Sequence`,
`Nats-Expected-Last-Subject-Sequence`; a null leaves the header out), which replace a header
of the same name in `headers`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Awaitable, Iterable
from typing import Any

import pyarrow as pa
from pyspark.sql.types import IntegralType, StringType, StructType

from ..client import Client
from ..client import errors as nats_errors
from ..protocol.headers import Headers
from ..protocol.subjects import is_valid_literal_subject
from .connection import ConnectorError, NatsConnection
from .options import OptionError, WriteOptions
from .publishing import AckedPublisher, columns, header_rows

JsRow = tuple[str, bytes, Headers | None]
_OK = b'{"stream":'  # how a PubAck starts, on both servers (an error PubAck: '{"error":')


def check_header_columns(schema: StructType, wopts: WriteOptions) -> WriteOptions:
    """The options with the columns they name as the schema spells them (Spark's names are
    case-insensitive); a missing column, or one of the wrong type, is refused."""
    fields = {f.name: f.dataType for f in schema.fields}
    found: dict[str, str] = {}
    for option, attr, kinds in (
            ("msgIdColumn", "msg_id_column", (StringType, IntegralType)),
            ("expectedLastSequenceColumn", "expected_last_sequence_column", (IntegralType,)),
            ("expectedLastSubjectSequenceColumn", "expected_last_subject_sequence_column",
             (IntegralType,))):
        wanted = getattr(wopts, attr)
        if not wanted:
            continue
        name = wanted if wanted in fields else next(
            (f for f in fields if f.lower() == wanted.lower()), None)
        if name is None:
            raise OptionError(f"option {option}: no column {wanted!r} (columns: "
                              f"{', '.join(fields)})")
        if not isinstance(fields[name], kinds):
            raise OptionError(f"option {option}: column {name!r} must be "
                              f"{'a string or ' if StringType in kinds else ''}an integer, "
                              f"not {fields[name].simpleString()}")
        found[attr] = name
    return dataclasses.replace(wopts, **found)


def refusal(subject: str, hdr: bytes | None, payload: bytes) -> str | None:
    """What the server's answer to a publish on `subject` says went wrong (None: stored)."""
    if hdr is not None and hdr.startswith(b"NATS/1.0 "):
        status = hdr[9:].split(b"\r\n", 1)[0].decode(errors="replace").strip()
        if status.startswith("503"):
            return f"no stream takes subject {subject!r} (503 no responders)"
        return f"publish to {subject!r}: status {status}"
    try:
        answer = json.loads(payload)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or "stream" not in answer and "error" not in answer:
        return f"publish to {subject!r}: not a JetStream PubAck: {payload[:200]!r}"
    error = answer.get("error")
    if not error:
        return None
    if not isinstance(error, dict):
        return f"publish to {subject!r}: {error}"
    return (f"publish to {subject!r} (stream {answer.get('stream')!r}): "
            f"{error.get('description')} (code {error.get('code')}, "
            f"err_code {error.get('err_code')})")


class JetStreamPublisher(AckedPublisher[int, JsRow]):
    """Rows published to JetStream, each answered on `<inbox>.<row number>`."""

    NO_ANSWER_HINT = (": is there a stream for the subjects? (a subject that only core "
                      "subscribers listen on gets no PubAck)")

    def __init__(self, copts: Any, wopts: WriteOptions) -> None:
        super().__init__(copts, wopts, itertools.count())
        self.conn: NatsConnection | None = None
        self.nc: Client | None = None
        self.inbox = ""  # `<inbox>.`, this connection's
        self.checked: set[str] = set()

    def rows(self, batch: pa.RecordBatch) -> Iterable[JsRow]:
        subjects, payloads = columns(batch, self.wopts.subject)
        for subject in set(subjects).difference(self.checked):
            if not is_valid_literal_subject(subject):
                raise OptionError(f"invalid subject {subject!r} (JetStream stores messages "
                                  "published to a subject without wildcards)")
            self.checked.add(subject)
        headers = header_rows(batch, self.wopts)
        return zip(subjects, payloads, [None] * len(subjects) if headers is None else headers,
                   strict=True)

    def _on_ack(self, subject: bytes, reply: bytes | None, hdr: bytes | None,
                payload: bytes) -> None:
        try:
            key = int(subject[len(self.inbox):])
        except ValueError:
            return
        if hdr is None and payload.startswith(_OK) and b'"error"' not in payload:
            self.answered(key)
            return
        row = self.unacked.get(key)
        if row is not None:
            self.answered(key, refusal(row[0], hdr, payload))

    async def _connect(self) -> None:
        self.nc = None
        self.conn = conn = NatsConnection(self.copts, "w")
        conn.on_lost.append(self.lost)
        await conn.connect_nats()
        nc = conn.nc
        assert nc is not None
        inbox = nc.new_inbox()
        await nc.subscribe(f"{inbox}.*", raw_cb=self._on_ack)
        self.nc, self.inbox = nc, f"{inbox}."

    def _send(self, key: int, row: JsRow) -> Awaitable[object]:
        return self.nc.publish(row[0], row[1], f"{self.inbox}{key}",  # type: ignore[union-attr]
                               row[2])

    def _send_failed(self, exc: BaseException, row: JsRow) -> BaseException:
        if not isinstance(exc, nats_errors.MaxPayloadError):
            return exc
        subject, payload, headers = row
        size = len(payload) + (len(headers.encode()) if headers else 0)
        return ConnectorError(f"publish to {subject!r}: {size} bytes exceed the server's "
                              f"max_payload ({self.nc.max_payload if self.nc else '?'})")

