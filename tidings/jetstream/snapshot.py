"""Stream snapshots and restores, `$JS.API.STREAM.SNAPSHOT.<stream>` and
`$JS.API.STREAM.RESTORE.<stream>`, as the reference serves them and `nats stream backup` /
`nats stream restore` drive them. The bytes are archive.py's: the reference's own format, so
a snapshot moves between tidings and the reference either way.

Snapshot: `{deliver_subject, no_consumers, chunk_size, window_size, jsck}` is answered with
the stream's `{config, state}`; the snapshot then goes to deliver_subject in chunks of
chunk_size bytes (128 KiB; kept within 1 KiB and 1 MiB), each with a reply subject
`$JS.SNAPSHOT.ACK.<stream>.<id>.<size>.<n>` the client answers: no more than window_size
(8 MiB; 1 KiB to 32 MiB) of them go unanswered. The last chunk, shorter, has no reply
subject. An empty message ends it: with a `NATS/1.0 204` header once a whole chunk went
(none otherwise, as the reference), `408 No Interest` when nobody listens any more to the
deliver subject, `408 No Flow Response` when no answer came for 5 seconds, `500 <why>` when
the stream went or its store failed. The messages are read from the store as the chunks
are asked for, up to the last sequence the snapshot began with (one removed meanwhile is
left out); one turn of the loop sends a bounded part of it.

Restore: `{config, state}` is answered with `{deliver_subject}`,
`$JS.SNAPSHOT.RESTORE.<stream>.<id>`; the client sends the snapshot there in chunks, each a
request (answered with an empty message), then an empty one, answered with the restored
stream's info (a `stream_create_response`) or the error. Each chunk is decoded as it comes:
a file stream's messages are written to block files (filestore.py's layout) in the
account's `__snapshots__` folder, moved into `streams/` and opened when the snapshot is
whole (in a worker thread: it reads the blocks as a restart does); a memory stream's are
stored as they come. A failure is told at the end, as the
reference tells it (the chunks after it are answered and dropped); a restore that hears
nothing for 5 seconds is given up.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..fileio import fsync_dir
from ..server import godecode
from ..server.accounts import (
    Account,
    publish_internal,
    subscribe_internal,
    unsubscribe_internal,
)
from ..server.gojson import go_json, parse_go_time
from . import archive, errors, limits
from .consumer import new_id
from .errors import ApiError
from .filestore import GAP_ENTRIES, PBIT, SEQ_MASK, TBIT, block_size_for, encode
from .stream import ZERO_TIME, Stream, normalize

if TYPE_CHECKING:
    from .api import JetStream

log = logging.getLogger("tidings.jetstream")

SNAPSHOT_TYPE = "io.nats.jetstream.api.v1.stream_snapshot_response"
RESTORE_TYPE = "io.nats.jetstream.api.v1.stream_restore_response"
CREATE_TYPE = "io.nats.jetstream.api.v1.stream_create_response"
CHUNK = 128 * 1024  # the reference's defaults and bounds
WINDOW = 8 * 1024 * 1024
ACK_TIMEOUT = 5.0  # seconds without an answer to a chunk
INTEREST_WAIT = 2.0  # seconds a snapshot waits for its deliver subject to be listened to
STALLED = 5.0  # seconds a restore waits for its next chunk
TURN_BYTES = 512 * 1024  # archive bytes a snapshot makes in one turn of the loop
GAP_STEP = 256  # missing sequences a snapshot passes over between two looks at its budget
TURN_STEPS = 1000
RESTORED_BLOCK = 1024 * 1024  # its blocks' largest size (opening it reads each whole)
MAX_DOCUMENT = 64 << 20  # the largest state or consumer entry a restore keeps
MAX_SEQ = SEQ_MASK  # the file store's largest sequence


def request(js: JetStream, account: Account, tokens: list[str], payload: bytes,
            reply: bytes) -> None:
    """STREAM.SNAPSHOT.<stream> or STREAM.RESTORE.<stream>, answered with its own response
    type (a restore's errors with an empty deliver_subject, as the reference's)."""
    restore = tokens[1] == "RESTORE"
    kind, extra = (RESTORE_TYPE, {"deliver_subject": ""}) if restore else (SNAPSHOT_TYPE, {})
    try:
        if not js.enabled_for(account):
            raise errors.NOT_ENABLED_FOR_ACCOUNT()
        name = tokens[2] if len(tokens) == 3 else ""
        if not name:
            raise errors.BAD_REQUEST()
        if restore:
            _restore(js, account, tokens, name, payload, reply)
        else:
            _snapshot(js, account, tokens, name, payload, reply)
    except ApiError as exc:
        js._reply(account, reply, kind, error=exc, **extra)


def _body(payload: bytes) -> Any:
    """The request's body, decoded as the reference decodes it (a syntax error in Go's
    words, with its offset); BAD_REQUEST when empty (nothing, or an empty object)."""
    try:
        body = godecode.loads_stream(payload) if payload.strip() else {}
    except godecode.GoJsonError as exc:
        raise errors.INVALID_JSON(err=str(exc)) from None
    if body == {}:
        raise errors.BAD_REQUEST()
    return body


# -- snapshot ----------------------------------------------------------------------------------

def _snapshot(js: JetStream, account: Account, tokens: list[str], name: str, payload: bytes,
              reply: bytes) -> None:
    """The reference's order: an empty body, the stream, the body, the deliver subject."""
    if not payload.strip() or _is_empty(payload):
        raise errors.BAD_REQUEST()
    stream = js.streams.get(account, {}).get(name)
    if stream is None:
        raise errors.STREAM_NOT_FOUND()
    body = js._typed(tokens, _body(payload), payload)
    opts = body if isinstance(body, dict) else {}
    deliver = opts.get("deliver_subject") or ""
    if not _publishable(deliver):
        raise errors.SNAPSHOT_DELIVER_SUBJECT_INVALID()
    state = stream.state()
    js._reply(account, reply, SNAPSHOT_TYPE, config=_stored_config(stream.config), state=state)
    Snapshot(js, account, stream, state, deliver, opts).start()


def _is_empty(payload: bytes) -> bool:
    try:
        return json.loads(payload) == {}
    except ValueError:
        return False


def _publishable(subject: str) -> bool:
    from ..protocol.subjects import is_valid_subject

    return bool(subject) and is_valid_subject(subject) and not any(
        token in ("*", ">") for token in subject.split("."))


def _stored_config(config: dict[str, Any]) -> dict[str, Any]:
    """A stream's configuration as the reference keeps it (the server's level and version
    are added to what it answers, not kept)."""
    meta = {k: v for k, v in (config.get("metadata") or {}).items()
            if k not in ("_nats.level", "_nats.ver")}
    return {**config, "metadata": meta} if meta else \
        {k: v for k, v in config.items() if k != "metadata"}


def _bounded(value: Any, default: int, low: int, high: int) -> int:
    value = value if isinstance(value, int) and value else default
    return min(max(low, value), high)


class Snapshot:
    """One snapshot on its way to a deliver subject, as fast as its window lets it."""

    def __init__(self, js: JetStream, account: Account, stream: Stream, state: dict[str, Any],
                 deliver: str, opts: dict[str, Any]) -> None:
        self.js, self.account, self.stream = js, account, stream
        self.deliver = deliver
        self.chunk = _bounded(opts.get("chunk_size"), CHUNK, 1024, 1024 * 1024)
        window = max(_bounded(opts.get("window_size"), WINDOW, 1024, 32 * 1024 * 1024),
                     self.chunk)
        self.slots = self.most = window // self.chunk
        self.ack = f"$JS.SNAPSHOT.ACK.{stream.name}.{new_id()}"
        consumers = [] if opts.get("no_consumers") else sorted(stream.consumers.items())
        self.source = _archive(stream, {**state, "consumer_count": len(consumers)}, consumers)
        self.pending = bytearray()  # archive bytes not in a chunk of the s2 stream yet
        self.out = bytearray(archive.STREAM_IDENTIFIER)  # the s2 stream, not sent yet
        self.exhausted = False
        self.index = 1
        self.whole_sent = False
        self.done = False
        self.scheduled = False
        self.sub: Any = None
        self.timer: Any = None
        self.waited = 0.0

    @property
    def loop(self) -> Any:
        return self.js.server.loop

    def start(self) -> None:
        self.sub = subscribe_internal(self.js.server.accounts, self.account,
                                      (self.ack + ".>").encode(), self._acked)
        self._soon()

    def _soon(self, delay: float = 0.0) -> None:
        if self.scheduled or self.done:
            return
        self.scheduled = True
        if delay:
            self.loop.call_later(delay, self.pump)
        else:
            self.loop.call_soon(self.pump)

    def _acked(self, subject: bytes, reply: bytes | None, headers: bytes | None,
               payload: bytes) -> None:
        if self.done:
            return
        self.slots = min(self.slots + 1, self.most)
        if not self.scheduled:
            self.pump()

    def pump(self) -> None:
        """Send what the window allows (a bounded part of it in this turn)."""
        self.scheduled = False
        if self.done:
            return
        if not self.account.listened(self.deliver):
            if self.index == 1 and self.waited < INTEREST_WAIT:  # (not there yet)
                self.waited += 0.05
                return self._soon(0.05)
            return self._end(b"NATS/1.0 408 No Interest\r\n\r\n")
        if self.js.streams.get(self.account, {}).get(self.stream.name) is not self.stream:
            return self._end(b"NATS/1.0 500 stream closed\r\n\r\n")
        try:
            self._send()
        except (OSError, ValueError) as exc:
            log.warning("JetStream: snapshot of stream '%s > %s' failed: %s",
                        self.account.name, self.stream.name, exc)
            self._end(f"NATS/1.0 500 {exc}\r\n\r\n".encode())

    def _send(self) -> None:
        budget = [TURN_BYTES, TURN_STEPS]
        while self.slots > 0 and not self.done:
            if not self._fill(budget):
                return self._soon()  # this turn's budget is spent: the next turn goes on
            if len(self.out) >= self.chunk:
                data = bytes(self.out[:self.chunk])
                del self.out[:self.chunk]
                target = f"{self.ack}.{len(data)}.{self.index}".encode()
                publish_internal(self.js.server, self.account, self.deliver.encode(), data,
                                 reply=target)
                self.index += 1
                self.slots -= 1
                self.whole_sent = True
                self._arm()
                continue
            if self.out:  # the last chunk: no answer asked
                publish_internal(self.js.server, self.account, self.deliver.encode(),
                                 bytes(self.out))
                self.out.clear()
            return self._end(b"NATS/1.0 204\r\n\r\n" if self.whole_sent else None)

    def _fill(self, budget: list[int]) -> bool:
        """A chunk's worth of the s2 stream ready (or all of it); False when the turn's
        budget ran out first."""
        while len(self.out) < self.chunk and not self.exhausted:
            if budget[0] <= 0 or budget[1] <= 0:
                return False
            piece = next(self.source, None)
            if piece is None:
                self.exhausted = True
            else:
                self.pending += piece
                budget[0] -= len(piece)
                budget[1] -= 1
            while len(self.pending) >= archive.FRAME or (self.exhausted and self.pending):
                view = self.pending[:archive.FRAME]
                self.out += archive.frame(view)
                del self.pending[:len(view)]
        return True

    def _arm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(ACK_TIMEOUT, self._no_answer)

    def _no_answer(self) -> None:
        self.timer = None
        if not self.done and self.slots == 0:
            self._end(b"NATS/1.0 408 No Flow Response\r\n\r\n")

    def _end(self, headers: bytes | None) -> None:
        self.done = True
        publish_internal(self.js.server, self.account, self.deliver.encode(), b"", headers)
        if self.sub is not None:
            unsubscribe_internal(self.js.server.accounts, self.account, self.sub)
        if self.timer is not None:
            self.timer.cancel()
        self.source.close()  # type: ignore[attr-defined]


def _archive(stream: Stream, state: dict[str, Any],
             consumers: list[tuple[str, Any]]) -> Iterator[bytes]:
    """The archive of a stream, piece by piece, read as it is asked for (an empty piece
    now and then while it passes over removed sequences)."""
    now = time.time_ns()
    yield archive.MAGIC + archive.document("state.json", go_json(state), now)
    for name, consumer in consumers:
        yield archive.document(f"consumers/{name}", go_json(_consumer_doc(consumer)), now)
    store = stream.store
    missing = 0
    for seq in range(state["first_seq"], state["last_seq"] + 1) if state["messages"] else ():
        msg = store.get(seq)
        if msg is None:
            missing += 1
            if missing % GAP_STEP == 0:
                yield b""
            continue
        headers = msg.headers or b""
        yield (archive.entry_head(msg.subject.encode(), msg.ts, seq, len(headers),
                                  len(msg.data)) + headers + msg.data)
    yield archive.END


def _consumer_doc(consumer: Any) -> dict[str, Any]:
    """A consumer's config and state as the reference's snapshot holds them (delivered,
    ack floor, pending by stream sequence, redeliveries), and where it reads next."""
    state: dict[str, Any] = {
        "delivered": {"consumer_seq": consumer.cseq, "stream_seq": consumer.dseq},
        "ack_floor": {"consumer_seq": consumer.ack_floor[0],
                      "stream_seq": consumer.ack_floor[1]}}
    pending = sorted(consumer.pending.items())
    if pending:
        state["pending"] = {str(seq): {"Sequence": p.cseq, "Timestamp": p.ts}
                            for seq, p in pending}
        again = {str(seq): p.deliveries - 1 for seq, p in pending if p.deliveries > 1}
        if again:
            state["redelivered"] = again
    state["next"] = consumer.next_seq  # (tidings': a filter may have read past delivered)
    return {"config": consumer.config, "state": state}


# -- restore -----------------------------------------------------------------------------------

def _restore(js: JetStream, account: Account, tokens: list[str], name: str, payload: bytes,
             reply: bytes) -> None:
    """The reference's order: an empty body, the body, the name, the configuration, the
    account's limits, a stream of that name."""
    body = js._typed(tokens, _body(payload), payload)
    raw = body.get("config") if isinstance(body, dict) else None
    raw = dict(raw) if isinstance(raw, dict) else {}
    if not raw.get("name"):
        raw["name"] = name
    if raw["name"] != name:
        raise errors.STREAM_MISMATCH()
    if "/" in name or "\\" in name:
        raise errors.STREAM_NAME_CONTAINS_PATH_SEPARATORS()
    if isinstance(raw.get("metadata"), dict):  # (the server's own keys are made again)
        raw["metadata"] = {k: v for k, v in raw["metadata"].items()
                           if not k.startswith("_nats.")}
    config = normalize(raw, name)
    streams = js.streams.setdefault(account, {})
    _check_limits(js, account, config, 0)
    if name in streams:
        raise errors.STREAM_NAME_EXIST_RESTORE_FAILED()
    restore = Restore(js, account, config)
    js._reply(account, reply, RESTORE_TYPE, deliver_subject=restore.subject)


def _check_limits(js: JetStream, account: Account, config: dict[str, Any],
                  size: int) -> None:
    """A new stream of `config` holding `size` bytes, against the account's and the
    server's limits (what the reference checks before and while it restores)."""
    streams = js.streams.setdefault(account, {})
    everyone = [s for mine in js.streams.values() for s in mine.values()]
    storage = config["storage"]
    server_max = {"memory": js.config.max_memory, "file": js.config.max_storage}
    reserve = dict(config, max_bytes=max(config["max_bytes"], size))
    limits.check_stream(js.limits(account), reserve, streams, everyone, server_max,
                        creating=True)
    if not size:
        return
    own = js.limits(account)
    account_max = own.max_memory if storage == "memory" else own.max_storage
    exceeded = errors.MEMORY_RESOURCES_EXCEEDED if storage == "memory" \
        else errors.STORAGE_RESOURCES_EXCEEDED
    if account_max >= 0 and limits.usage(streams.values(), storage) + size > account_max:
        raise exceeded()
    if server_max[storage] >= 0 and limits.usage(everyone, storage) + size > \
            server_max[storage]:
        raise exceeded()


class RestoreFailed(Exception):
    """A restore refused for what its snapshot holds (the reference's words)."""


class Restore:
    """One restore, fed by the chunks sent to its deliver subject."""

    def __init__(self, js: JetStream, account: Account, config: dict[str, Any]) -> None:
        self.js, self.account, self.config = js, account, config
        self.name = str(config["name"])
        self.subject = f"$JS.SNAPSHOT.RESTORE.{self.name}.{new_id()}"
        self.s2 = archive.S2Reader()
        self.archive = archive.ArchiveReader(self._check_entry)
        self.state: dict[str, Any] | None = None
        self.expected = 0  # consumers the state counts
        self.consumers: list[tuple[str, Any]] = []
        self.reserved = 0  # bytes the limits were checked for (the state's, or more)
        self.target: _FileTarget | _MemoryTarget | None = None
        self.last = 0  # the last sequence restored
        self.complete = False  # the archive's end was read
        self.error: BaseException | None = None
        self.finished = False
        self.received = 0
        self.started = time.monotonic()
        self.sub = subscribe_internal(js.server.accounts, account, self.subject.encode(),
                                      self._chunk)
        self.timer = js.server.loop.call_later(STALLED, self._stalled)
        log.info("Starting restore for stream '%s > %s'", account.name, self.name)

    # -- chunks --------------------------------------------------------------------------
    def _chunk(self, subject: bytes, reply: bytes | None, headers: bytes | None,
               payload: bytes) -> bool | None:
        if self.finished:
            return False
        if not reply:
            log.warning("restore for stream '%s > %s' requires reply subject for each chunk",
                        self.account.name, self.name)
            self._close()
            return None
        self.timer.cancel()
        self.timer = self.js.server.loop.call_later(STALLED, self._stalled)
        if not payload:
            self._finish(reply)
            return None
        self.received += len(payload)
        if self.error is None and not self.complete:
            try:
                self._take(payload)
            except (archive.FormatError, RestoreFailed, ApiError, OSError, ValueError) as exc:
                self._fail(exc)
        publish_internal(self.js.server, self.account, reply, b"")
        return None

    def _take(self, payload: bytes) -> None:
        for decoded in self.s2.feed(payload):
            for entry in self.archive.feed(decoded):
                self._entry(entry)
                if self.complete:
                    return

    def _check_entry(self, name: str, seq: int, header_size: int, payload_size: int) -> None:
        """An entry's sizes, before its bytes are kept."""
        if not seq:
            if header_size + payload_size > MAX_DOCUMENT:
                raise RestoreFailed(f"entry {name!r} is too large")
            return
        most = self.js.server.options.max_payload
        if header_size > most or payload_size > most - header_size:
            raise RestoreFailed(f"message sequence {seq} exceeds maximum payload size")
        size = self.config["max_msg_size"]
        if size >= 0 and (header_size > size or payload_size > size - header_size):
            raise RestoreFailed(f"message sequence {seq} exceeds maximum message size")

    def _entry(self, entry: archive.Entry) -> None:
        if self.state is None:
            return self._begin(entry)
        if len(self.consumers) < self.expected:
            name = entry.name.removeprefix("consumers/")
            if name == entry.name or entry.seq:
                raise RestoreFailed(f"expected consumer, found {json.dumps(entry.name)}")
            try:
                self.consumers.append((name, json.loads(entry.payload)))
            except ValueError as exc:
                raise RestoreFailed(f"failed to decode consumer {json.dumps(name)} state: "
                                    f"{exc}") from None
            return None
        if not entry.seq:
            if entry.ts or entry.headers or entry.payload:
                raise RestoreFailed("expected message sequence")
            self.complete = True
            return None
        if entry.seq <= self.last:
            raise RestoreFailed(f"message sequence {entry.seq} out of order")
        if entry.seq > MAX_SEQ or entry.ts < 0:  # (what a store cannot hold, or say)
            raise RestoreFailed(f"message sequence {entry.seq} out of range")
        self.last = entry.seq
        assert self.target is not None
        self.target.add(entry)
        if self.target.bytes > self.reserved:  # (more than the state said)
            self.reserved = self.target.bytes
            _check_limits(self.js, self.account, self.config, self.reserved)
        return None

    def _begin(self, entry: archive.Entry) -> None:
        """The snapshot's state, first: the stream's limits checked for what it holds."""
        if entry.name != "state.json" or entry.seq:
            raise RestoreFailed("expected state.json first")
        try:
            state = json.loads(entry.payload)
            if not isinstance(state, dict):
                raise ValueError("not an object")
            first, last = int(state.get("first_seq") or 0), int(state.get("last_seq") or 0)
            self.expected = int(state.get("consumer_count") or 0)
            self.reserved = int(state.get("bytes") or 0)
            if not 0 <= first <= MAX_SEQ or not 0 <= last <= MAX_SEQ:
                raise ValueError("sequence out of range")
        except (ValueError, TypeError) as exc:
            raise RestoreFailed(f"error in state.json: {exc}") from None
        if self.name in self.js.streams.get(self.account, {}):
            raise errors.STREAM_NAME_EXIST_RESTORE_FAILED()
        _check_limits(self.js, self.account, self.config, self.reserved)
        self.state = state
        self.last = max(first - 1, 0)
        last_ts = state.get("last_ts") or ZERO_TIME
        ends = (last, parse_go_time(last_ts) if last_ts != ZERO_TIME else 0)
        if self.config["storage"] == "file":
            folder = os.path.join(self.js.config.store_dir, self.account.name, "__snapshots__",
                                  f"snap-{new_id()}")
            self.target = _FileTarget(folder, self.config, ends)
        else:
            self.target = _MemoryTarget(self.config, first, ends)

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        if self.target is not None:
            self.target.discard()
            self.target = None

    # -- the end -------------------------------------------------------------------------
    def _finish(self, reply: bytes) -> None:
        """The empty chunk: the stream is made (or the error told). A file stream is opened
        (its blocks read back, as a restart reads them) in a worker thread: a large one must
        not hold the loop; its name is taken meanwhile."""
        if self.error is None and not self.complete:
            try:
                self.s2.end()
                self.archive.end()
            except archive.FormatError as exc:
                self._fail(exc)
        if self.error is not None:
            return self._answer(reply, None)
        streams = self.js.streams.setdefault(self.account, {})
        if self.name in streams or (self.account, self.name) in self.js.restoring:
            self._fail(errors.STREAM_NAME_EXIST_RESTORE_FAILED())
            return self._answer(reply, None)
        target, self.target = self.target, None
        assert target is not None
        directory = self.js._stream_dir(self.account, self.name)
        sync_always = self.js.config.sync_always
        if isinstance(target, _MemoryTarget):
            return self._opened(reply, target, lambda: target.open(directory, sync_always))
        key = (self.account, self.name)
        self.js.restoring.add(key)
        opening = self.js.server.loop.run_in_executor(None, target.open, directory,
                                                      sync_always)

        def opened(done: Any) -> None:
            self.js.restoring.discard(key)
            self._opened(reply, target, done.result)
            if self.js.server.reader is None:
                self.js.server.flush()
        opening.add_done_callback(opened)

    def _opened(self, reply: bytes, target: Any, opening: Any) -> None:
        stream = None
        try:
            stream = self._serve(opening())
        except (RestoreFailed, ApiError, OSError, ValueError) as exc:
            self._fail(exc)
        except Exception as exc:  # (a defect: answered all the same, never left waiting)
            log.exception("restore of stream '%s > %s' failed", self.account.name, self.name)
            self._fail(exc)
        if stream is None:
            target.discard()
        self._answer(reply, stream)

    def _answer(self, reply: bytes, stream: Stream | None) -> None:
        self._close()
        if stream is None:
            failed = errors.STREAM_RESTORE(err=self.error, unless=self.error)
            log.warning("Restore failed for %d bytes for stream '%s > %s': %s", self.received,
                        self.account.name, self.name, self.error)
            body: dict[str, Any] = {"type": CREATE_TYPE, "error": failed.as_json()}
        else:
            log.info("Completed restore of %d bytes for stream '%s > %s' in %.3fs",
                     self.received, self.account.name, self.name,
                     time.monotonic() - self.started)
            body = {"type": CREATE_TYPE, **self.js._info(stream)}
        publish_internal(self.js.server, self.account, reply, go_json(body))

    def _serve(self, stream: Stream) -> Stream:
        """The restored stream, with its consumers, served."""
        try:
            for name, doc in self.consumers:
                _add_consumer(self.js, self.account, stream, name, doc)
        except (RestoreFailed, ApiError):
            stream.destroy()
            raise
        stream.restore_ttls()
        self.js.streams.setdefault(self.account, {})[self.name] = stream
        self.js._subscribe(self.account, stream)
        if stream.ttls or stream.config["max_age"]:
            self.js._arm_expiry(stream)
        for consumer in list(stream.consumers.values()):
            consumer.pump()
        return stream

    def _stalled(self) -> None:
        if not self.finished:
            log.warning("restore for stream '%s > %s' is stalled", self.account.name,
                        self.name)
            self._fail(RestoreFailed("stalled"))
            self._close()

    def _close(self) -> None:
        self.finished = True
        self.timer.cancel()
        unsubscribe_internal(self.js.server.accounts, self.account, self.sub)
        if self.target is not None:
            self.target.discard()
            self.target = None


def _add_consumer(js: JetStream, account: Account, stream: Stream, name: str,
                  doc: Any) -> None:
    """A consumer of the snapshot, where it was."""
    from .consumer_config import check, check_on_stream
    from .consumer_config import normalize as normalize_consumer

    quoted = json.dumps(name)
    config = doc.get("config") if isinstance(doc, dict) else None
    state = doc.get("state") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise RestoreFailed(f"consumer {quoted} is missing config")
    if not isinstance(state, dict):
        raise RestoreFailed(f"consumer {quoted} is missing state")
    if not name or "/" in name or "\\" in name or name in stream.consumers:
        raise RestoreFailed(f"failed to add consumer {quoted}: bad name")
    raw = dict(config)
    if not raw.get("durable_name"):
        raw["name"] = name
    try:
        cfg = normalize_consumer(raw, stream=stream.config)
        check(cfg, stream.config)
        check_on_stream(cfg, stream.config, [c.config for c in stream.consumers.values()])
        position = _position(state)
    except (ApiError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise RestoreFailed(f"failed to add consumer {quoted}: {exc}") from None
    consumer = js._new_consumer(account, stream, name, cfg)
    consumer.restore(position)
    stream.consumers[name] = consumer
    if consumer.durable:
        failed = stream.save_consumer(consumer)
        if failed is not None:
            raise RestoreFailed(f"failed to set consumer {quoted} state: {failed}")


def _position(state: dict[str, Any]) -> dict[str, Any]:
    """The reference's ConsumerState as tidings' consumer restores it."""
    delivered = state.get("delivered") or {}
    floor = state.get("ack_floor") or {}
    again = state.get("redelivered") or {}
    dseq = int(delivered.get("stream_seq") or 0)
    pending = {str(int(seq)): [int(p.get("Sequence") or 0), int(again.get(seq) or 0) + 1]
               for seq, p in (state.get("pending") or {}).items()}
    return {"delivered": [int(delivered.get("consumer_seq") or 0), dseq],
            "next": int(state.get("next") or dseq + 1),
            "ack_floor": [int(floor.get("consumer_seq") or 0),
                          int(floor.get("stream_seq") or 0)],
            "pending": pending}


class _FileTarget:
    """A restored file stream's messages, written as block files of filestore.py in a
    folder of its own until the snapshot is whole."""

    def __init__(self, folder: str, config: dict[str, Any], ends: tuple[int, int]) -> None:
        self.folder, self.config, self.ends = folder, config, ends
        os.makedirs(os.path.join(folder, "msgs"), exist_ok=True)
        self.block_size = min(block_size_for(config["retention"], config["max_bytes"]),
                              RESTORED_BLOCK)
        self.file: Any = None
        self.index = 0
        self.size = 0
        self.last = 0
        self.count = 0
        self.bytes = 0

    def add(self, entry: archive.Entry) -> None:
        rec = encode(entry.seq, entry.ts, entry.name.encode(), entry.headers or None,
                     entry.payload)
        self._write(entry.seq, rec)
        self.count += 1
        self.bytes += len(rec)

    def _write(self, seq: int, rec: bytes) -> None:
        if self.file is None or (self.size and self.size + len(rec) > self.block_size) \
                or seq - self.last > GAP_ENTRIES:
            self._next_block()
        self.file.write(rec)
        self.size += len(rec)
        self.last = seq

    def _next_block(self) -> None:
        self._close_block()
        self.index += 1
        path = os.path.join(self.folder, "msgs", f"{self.index}.blk")
        self.file = open(path, "wb", buffering=256 * 1024)  # noqa: SIM115
        self.size = 0

    def _close_block(self) -> None:
        if self.file is not None:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            self.file = None

    def open(self, directory: str, sync_always: bool) -> Stream:
        """The stream, once its last sequence is written, moved to `directory`."""
        last, last_ts = self.ends
        if not self.count and last:  # nothing left: a purge mark keeps the sequence
            self._write(last, encode(PBIT | last, last_ts, b"", None, b""))
        elif self.last < last:  # removed at the end: a record of the last, and its removal
            self._write(last, encode(last, last_ts, b"", None, b""))
            self.file.write(encode(TBIT | last, 0, b"", None, b""))
        self._close_block()
        fsync_dir(os.path.join(self.folder, "msgs"))
        os.makedirs(os.path.dirname(directory), exist_ok=True)
        if os.path.exists(directory):  # (a folder a stream no longer uses)
            shutil.rmtree(directory)
        os.rename(self.folder, directory)
        fsync_dir(os.path.dirname(directory))
        return Stream(self.config, directory, sync_always)

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            self._close_block()
        shutil.rmtree(self.folder, ignore_errors=True)


class _MemoryTarget:
    """A restored memory stream, stored as the snapshot comes."""

    def __init__(self, config: dict[str, Any], first: int, ends: tuple[int, int]) -> None:
        self.stream = Stream(config)
        self.ends = ends
        store = self.stream.store
        if first > 1:
            store.first_seq, store.last_seq = first, first - 1

    @property
    def bytes(self) -> int:
        return int(self.stream.store.bytes)

    def add(self, entry: archive.Entry) -> None:
        store = self.stream.store
        store.last_seq = entry.seq - 1
        store.store(entry.name, entry.headers or None, entry.payload, entry.ts)

    def open(self, directory: str, sync_always: bool) -> Stream:
        store = self.stream.store
        last, last_ts = self.ends
        if store.last_seq < last:
            store.last_seq, store.last_ts = last, last_ts
        if not store.count:
            store.first_seq = store.last_seq + 1
        return self.stream

    def discard(self) -> None:
        self.stream.store.purge()
