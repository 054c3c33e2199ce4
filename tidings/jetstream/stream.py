"""A JetStream stream: its configuration (the reference's defaults, checks and JSON field
order), its store, and the publishes it captures (stored, deduplicated by `Nats-Msg-Id`
within the duplicate window, answered with a PubAck).
"""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import os
import shutil
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ..config.jetstream import API_LEVEL
from ..fileio import fsync_dir
from ..protocol.headers import header_fields, replace_header
from ..protocol.subjects import is_valid_subject, subject_matches
from . import errors
from .filestore import CommitFailed
from .memstore import MemoryStore, StoredMsg

log = logging.getLogger("tidings.jetstream")

SERVER_VERSION = "2.11.0"
DEFAULT_DUPLICATE_WINDOW = 120 * 10**9  # ns
NS = 10**9

# The configuration's fields in the reference's order, with their defaults (None: omitted
# when not given, as its `omitempty` fields are).
_FIELDS: list[tuple[str, Any]] = [
    ("name", ""), ("description", None), ("subjects", None), ("retention", "limits"),
    ("max_consumers", -1), ("max_msgs", -1), ("max_bytes", -1), ("max_age", 0),
    ("max_msgs_per_subject", -1), ("max_msg_size", -1), ("discard", "old"),
    ("storage", "file"), ("num_replicas", 1), ("no_ack", None),
    ("duplicate_window", None), ("placement", None), ("mirror", None), ("sources", None),
    ("compression", "none"), ("first_seq", None), ("subject_transform", None),
    ("republish", None), ("allow_direct", False), ("mirror_direct", False),
    ("discard_new_per_subject", None), ("sealed", False), ("deny_delete", False),
    ("deny_purge", False), ("allow_rollup_hdrs", False), ("consumer_limits", {}),
    ("allow_msg_ttl", False), ("subject_delete_marker_ttl", None), ("metadata", None),
]
_KNOWN = {name for name, _ in _FIELDS}
_OMITTED_AT_ZERO = {name for name, default in _FIELDS if default is None}
_CHOICES = {"retention": ("limits", "interest", "workqueue"), "discard": ("old", "new"),
            "storage": ("file", "memory"), "compression": ("none", "s2")}
# Fields tidings does not build yet: a stream asking for them is refused by name.
NOT_BUILT = ("placement", "allow_msg_counter", "allow_atomic",
             "allow_msg_schedules", "allow_batched", "persist_mode")
MAX_NAME = 255  # bytes (JSMaxNameLen)
MAX_DESCRIPTION = 4 * 1024
MS100 = NS // 10


def _is_zero(value: Any) -> bool:
    """A scalar at its zero value (False, 0, "")."""
    return not value and isinstance(value, (bool, int, float, str))


def normalize(raw: dict[str, Any], name: str) -> dict[str, Any]:
    """The configuration a STREAM.CREATE asks for, filled in and checked as the reference
    does (its defaults; `name` from the subject; subjects default to the name)."""
    if not isinstance(raw, dict):
        raise errors.INVALID_JSON(err="json: cannot unmarshal into Go value of type server.StreamConfig")
    given = raw.get("name") or ""
    if given and given != name:
        raise errors.STREAM_MISMATCH()
    if "/" in name or "\\" in name:  # (the API's own check, before the configuration's)
        raise errors.STREAM_NAME_CONTAINS_PATH_SEPARATORS()
    if not valid_asset_name(name):
        raise errors.STREAM_INVALID_CONFIG(
            err="stream name is required and can not contain '.', '*', '>', '\\', '/'")
    if len(name.encode()) > MAX_NAME:
        raise errors.STREAM_INVALID_CONFIG(
            err=f"stream name is too long, maximum allowed is {MAX_NAME}")
    for field in NOT_BUILT:
        if raw.get(field) and not (field == "persist_mode" and raw[field] == "default"):
            raise errors.STREAM_INVALID_CONFIG(err=f"stream {field} is not supported by tidings yet")
    cfg: dict[str, Any] = {}
    for field, default in _FIELDS:
        value = raw.get(field)
        if value is None:  # (null, as Go reads it, leaves the default)
            value = default
        if value is None or (default is None and _is_zero(value)):
            continue  # (an omitempty field at its zero value is left out, as Go leaves it)
        cfg[field] = value
    cfg["name"] = name
    for field, choices in _CHOICES.items():
        if cfg[field] not in choices:
            raise errors.STREAM_INVALID_CONFIG(err=f"invalid {field} {cfg[field]!r}")
    copies = bool(cfg.get("mirror") or cfg.get("sources"))  # (sourcing.py)
    subjects = cfg.get("subjects") or ([] if copies else [name])
    if not isinstance(subjects, list) or not all(
            isinstance(s, str) and is_valid_subject(s) for s in subjects):
        raise errors.STREAM_INVALID_CONFIG(err="invalid subject")
    if subjects:
        cfg["subjects"] = subjects
    else:  # (a stream that only copies others: no subjects of its own)
        cfg.pop("subjects", None)
    if cfg["num_replicas"] in (0, None):
        cfg["num_replicas"] = 1
    if cfg["num_replicas"] > 1:
        raise errors.STREAM_REPLICAS_NOT_SUPPORTED()
    for field in ("max_msgs", "max_bytes", "max_msgs_per_subject", "max_msg_size",
                  "max_consumers"):
        if cfg[field] == 0:
            cfg[field] = -1
    _check_limits(cfg, given_window="duplicate_window" in cfg)
    _check_transforms(cfg)
    meta = dict(cfg.get("metadata") or {})
    meta.update({"_nats.level": str(API_LEVEL), "_nats.req.level": "0",
                 "_nats.ver": SERVER_VERSION})
    cfg["metadata"] = meta
    return _ordered(cfg)


def _invalid(err: str) -> errors.ApiError:
    return errors.STREAM_INVALID_CONFIG(err=err)


def _check_limits(cfg: dict[str, Any], given_window: bool) -> None:
    """The reference's checks of a configuration's limits, in its order (and what it fills
    in: the duplicate window; what subject delete markers need)."""
    if len(cfg.get("description") or "") > MAX_DESCRIPTION:
        raise _invalid(f"stream description is too long, maximum allowed is {MAX_DESCRIPTION}")
    max_age = cfg["max_age"]
    if max_age < 0:
        raise _invalid("max age can not be negative")
    if max_age and max_age < MS100:
        raise _invalid("max age needs to be >= 100ms")
    window = cfg.get("duplicate_window") or 0
    if not window and not (cfg.get("mirror") or cfg.get("sources")):
        window = min(DEFAULT_DUPLICATE_WINDOW, max_age) if max_age else DEFAULT_DUPLICATE_WINDOW
    if window < 0:
        raise _invalid("duplicates window can not be negative")
    if given_window and max_age and window > max_age:
        raise _invalid("duplicates window can not be larger then max age")
    if 0 < window < MS100:
        raise _invalid("duplicates window needs to be >= 100ms")
    if window:
        cfg["duplicate_window"] = window
    else:
        cfg.pop("duplicate_window", None)
    if cfg.get("deny_purge") and cfg.get("allow_rollup_hdrs"):
        raise _invalid("roll-ups require the purge permission")
    if cfg.get("discard_new_per_subject"):
        if cfg["discard"] != "new":
            raise _invalid("discard new per subject requires discard new policy to be set")
        if cfg["max_msgs_per_subject"] <= 0:
            raise _invalid("discard new per subject requires max msgs per subject > 0")
    marker_ttl = cfg.get("subject_delete_marker_ttl") or 0
    if marker_ttl < 0:
        raise _invalid("subject delete marker TTL must not be negative")
    if marker_ttl:
        if marker_ttl < NS:
            raise _invalid("subject delete marker TTL must be at least 1 second")
        cfg["allow_msg_ttl"] = True
        if not cfg.get("allow_rollup_hdrs"):
            cfg["allow_rollup_hdrs"], cfg["deny_purge"] = True, False


def transform_for(src: str, dest: str) -> Any:
    """A stream's transform (None when the reference would not make it: the destination
    names the source's `*` by position, never bare, and has a `>` when the source has)."""
    from ..protocol.transform import Transform, TransformError

    src_tokens, dest_tokens = src.split("."), dest.split(".")
    if not is_valid_subject(src) or not is_valid_subject(dest) or "*" in dest_tokens \
            or (">" in src_tokens) != (">" in dest_tokens):
        return None
    try:
        return Transform(src.encode(), dest.encode())
    except TransformError:
        return None


def _check_transforms(cfg: dict[str, Any]) -> None:
    """The stream's subject transform and republish, checked as the reference does."""
    from ..protocol.subjects import subjects_collide

    transform = cfg.get("subject_transform")
    if transform:
        src, dest = str(transform.get("src") or ""), str(transform.get("dest") or "")
        if src and not is_valid_subject(src):
            raise errors.STREAM_TRANSFORM_INVALID_SOURCE(err=f"invalid subject {src}")
        if transform_for(src or ">", dest) is None:
            raise errors.STREAM_TRANSFORM_INVALID_DESTINATION(err="invalid mapping destination")
    republish = cfg.get("republish")
    if republish:
        republish = cfg["republish"] = {**republish, "src": republish.get("src") or ">"}
        dest = str(republish.get("dest") or "")
        if any(subjects_collide(dest, subject) for subject in cfg.get("subjects", [])):
            raise _invalid("stream configuration for republish destination forms a cycle")
        if transform_for(republish["src"], dest) is None:
            raise _invalid(f"stream configuration for republish with transform from "
                           f"'{republish['src']}' to '{dest}' not valid")


def check_update(old: dict[str, Any], new: dict[str, Any]) -> None:
    """What a STREAM.UPDATE may not change, with the reference's words."""
    if new["storage"] != old["storage"]:
        raise _invalid("stream configuration update can not change storage type")
    if new["retention"] != old["retention"] and "workqueue" in (old["retention"],
                                                               new["retention"]):
        raise _invalid("stream configuration update can not change retention policy "
                       "to/from workqueue")
    if old.get("sealed") and not new.get("sealed"):
        raise _invalid("stream configuration update can not unseal a sealed stream")
    if old.get("deny_delete") and not new.get("deny_delete"):
        raise _invalid("stream configuration update can not cancel deny message deletes")
    if old.get("deny_purge") and not new.get("deny_purge"):
        raise _invalid("stream configuration update can not cancel deny purge")
    if old.get("allow_msg_ttl") and not new.get("allow_msg_ttl"):
        raise _invalid("message TTL status can not be disabled")


def message_ttl(value: str) -> int:
    """A `Nats-TTL` header's seconds (-1: never expires), or the reference's refusal."""
    from ..config.units import go_duration

    if value.lower() == "never":
        return -1
    try:
        seconds = go_duration(value)
    except ValueError:
        if not value.isdigit():
            raise errors.MESSAGE_TTL_INVALID() from None
        return int(value)
    if seconds < 1:
        raise errors.MESSAGE_TTL_INVALID()
    return int(seconds)


def last_on(store: Any, subject: str) -> StoredMsg | None:
    """The last message on `subject`, a literal or a filter (the latest of the subjects it
    matches)."""
    if "*" not in subject and ">" not in subject:
        return store.last_for(subject)  # type: ignore[no-any-return]
    last = max((store.last_seq_for(s) for s in list(store.subjects)
                if subject_matches(subject, s)), default=0)
    return store.get(last) if last else None  # type: ignore[no-any-return]


def next_on(store: Any, subject: str, seq: int) -> StoredMsg | None:
    """The first message at or after `seq` on `subject` (a filter)."""
    if subject == ">":
        for n in range(max(seq, store.first_seq, 1), store.last_seq + 1):
            msg = store.get(n)
            if msg is not None:
                return msg  # type: ignore[no-any-return]
        return None
    for n in store.matching(max(seq, 1), lambda found: subject_matches(subject, found)):
        msg = store.get(n)
        if msg is not None:
            return msg  # type: ignore[no-any-return]
    return None


def _mapped(transform: Any, subject: str) -> str:
    """`subject` through the stream's input transform (unchanged when it does not match)."""
    if not subject_matches(transform.source, subject):
        return subject
    return str(transform.apply(subject.encode()).decode())


def _ordered(cfg: dict[str, Any]) -> dict[str, Any]:
    return {field: cfg[field] for field, _ in _FIELDS if field in cfg}


def valid_asset_name(name: str) -> bool:
    """A stream's, consumer's or source's name as the reference takes one (its
    isValidAssetName): not empty, no space, tab, CR, LF, form feed, `.`, `*`, `>` or path
    separator."""
    return bool(name) and not any(c in name for c in " \t\r\n\f.*>/\\")



def same_config(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two configurations are the same request (metadata's server keys aside)."""
    def strip(cfg: dict[str, Any]) -> dict[str, Any]:  # (zero values: as saved before)
        out = {k: v for k, v in cfg.items() if not (k in _OMITTED_AT_ZERO and _is_zero(v))}
        out["metadata"] = {k: v for k, v in (cfg.get("metadata") or {}).items()
                           if not k.startswith("_nats.")}
        return out

    return strip(a) == strip(b)


class Stream:
    """One stream of an account: its configuration, messages and duplicate window. A file
    stream keeps its messages and its configuration (`meta.json`) in `directory`."""

    def __init__(self, config: dict[str, Any], directory: str = "", sync_always: bool = False,
                 created: int = 0, saved: bool = False) -> None:
        self.config = config
        self.created = created or time.time_ns()
        self.directory = directory if config["storage"] == "file" else ""
        self.store: Any
        if self.directory:
            from .filestore import FileStore, block_size_for

            os.makedirs(self.directory, exist_ok=True)
            self.store = FileStore(self.directory, config.get("first_seq") or 1,
                                   block_size=block_size_for(config["retention"],
                                                             config["max_bytes"]),
                                   sync_always=sync_always,
                                   compress=config.get("compression") == "s2")
            if not saved:  # (read back from disk, it is not written again: on a full disk
                self.save_config()  # the stream must still be served)
        else:
            self.store = MemoryStore(config.get("first_seq") or 1)
        self.msg_ids: OrderedDict[str, tuple[int, int]] = OrderedDict()  # id -> (seq, ts)
        self.last_msg_id = ""  # the Nats-Msg-Id of the message stored last ("": none)
        self.subs: list[Any] = []  # its subscriptions in the account (api.py)
        self.consumers: dict[str, Any] = {}  # name -> consumer.Consumer
        self.store.on_remove = self._removed
        self.domain = ""  # JetStream's domain, in PubAcks
        # Told of each message it stores (the streams that copy it: sourcing.py), and the
        # links by which it copies others (its mirror or sources), for its info.
        self.stored: Callable[[Stream, StoredMsg], None] | None = None
        self.links: list[Any] = []
        # Where a stored message is published again (republish), by the caller.
        self.republished: Any = None  # (subject, headers, data) -> None
        self.ttls: list[tuple[int, int]] = []  # heap of (expiry ns, seq): Nats-TTL's
        self.never: set[int] = set()  # sequences whose Nats-TTL says never (max_age aside)

    @property
    def name(self) -> str:
        return str(self.config["name"])

    def reconfigure(self, config: dict[str, Any]) -> None:
        """An update's configuration in force (saved by the caller)."""
        self.config = config
        if self.directory:
            self.store.set_compress(config.get("compression") == "s2")

    def save_config(self) -> None:
        """Its configuration on disk (a file stream's), written whole then renamed."""
        if not self.directory:
            return
        path = os.path.join(self.directory, META_FILE)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"config": self.config, "created": self.created}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)

    @classmethod
    def load(cls, directory: str, sync_always: bool = False) -> Stream | None:
        """A file stream as a previous run left it (None: no readable configuration)."""
        try:
            with open(os.path.join(directory, META_FILE), encoding="utf-8") as f:
                meta = json.load(f)
            stream = cls(meta["config"], directory, sync_always, int(meta.get("created") or 0),
                         saved=True)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        stream.restore_ttls()
        stream.restore_msg_ids()
        return stream

    def close(self) -> None:
        if self.directory:
            self.save_consumers()
            self.store.close()

    # -- durable consumers of a file stream, on disk -----------------------------------------
    def _consumer_file(self, name: str) -> str:
        return os.path.join(self.directory, "obs", name, "state.json")

    def save_consumers(self, only_changed: bool = False) -> None:
        """The durable consumers' positions (all, or those that changed since)."""
        for consumer in self.consumers.values():
            if consumer.durable:
                self.save_consumer(consumer, only_changed)

    def save_consumer(self, consumer: Any, only_changed: bool = False) -> OSError | None:
        """A durable consumer's position on disk, written whole then renamed (fsynced with
        sync_always, as the reference's); the error when it cannot be written (a full
        disk: the file keeps the last state saved, and the next save tries again)."""
        if not self.directory:
            return None
        state = consumer.snapshot()
        if only_changed and state == consumer.saved:
            return None
        path = self._consumer_file(consumer.name)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(state, f)
                if self.store.sync_always:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(path + ".tmp", path)
            if self.store.sync_always:
                fsync_dir(os.path.dirname(path))
        except OSError as exc:
            log.warning("JetStream: consumer %s > %s: state not saved: %s", self.name,
                        consumer.name, exc)
            with contextlib.suppress(OSError):
                os.unlink(path + ".tmp")
            return exc
        consumer.saved = state
        return None

    def forget_consumer(self, name: str) -> None:
        if self.directory:
            shutil.rmtree(os.path.dirname(self._consumer_file(name)), ignore_errors=True)

    def saved_consumers(self) -> list[dict[str, Any]]:
        """The durable consumers a previous run left."""
        folder = os.path.join(self.directory, "obs")
        found = []
        for name in sorted(os.listdir(folder)) if self.directory and os.path.isdir(folder) else []:
            try:
                with open(self._consumer_file(name), encoding="utf-8") as f:
                    found.append(json.load(f))
            except (OSError, ValueError):
                continue
        return found

    def destroy(self) -> None:
        """Deleted: its files go too."""
        self.close()
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    # -- publishing ------------------------------------------------------------------------
    @property
    def config(self) -> dict[str, Any]:
        return self._config

    @config.setter
    def config(self, config: dict[str, Any]) -> None:
        """(A new configuration: its transforms made once.)"""
        self._config = config
        self.removes_acked = config["retention"] != "limits"  # (acks remove messages)
        self._window = config.get("duplicate_window") or 0
        self._ids_due = 0  # when the oldest id leaves the window (0: to be found out)
        given = config.get("subject_transform") or {}
        self._input = transform_for(given.get("src") or ">", given["dest"]) \
            if given.get("dest") else None
        again = config.get("republish") or {}
        self._republish = transform_for(again.get("src") or ">", again.get("dest") or ">") \
            if again else None

    def publish(self, subject: str, headers: bytes | None, data: bytes, *,
                ts: int | None = None, at_seq: int = 0) -> dict[str, Any]:
        """Store a captured message; the PubAck's body (errors.ApiError when refused).
        A mirror's copy (sourcing.py) comes with its origin's time and sequence (`at_seq`):
        stored as it is, its publish headers not judged again. A publish's headers are
        judged in the reference's order (see _judge)."""
        cfg = self._config
        if self._input is not None:
            subject = _mapped(self._input, subject)
        fields = jetstream_fields(headers) if headers else {}
        if cfg.get("sealed"):
            raise errors.STREAM_SEALED()
        max_size = cfg["max_msg_size"]
        if max_size > 0 and len(data) + len(headers or b"") > max_size:
            raise errors.STREAM_MESSAGE_EXCEEDS_MAXIMUM()
        msg_id = rollup = None
        ttl = 0
        if fields and at_seq:
            ttl = self._copied_ttl(fields)
        elif fields:
            judged = self._judge(subject, fields, headers)
            if isinstance(judged, dict):
                return judged  # a duplicate's PubAck
            msg_id, rollup, ttl, headers = judged
        store = self.store
        if cfg["discard"] == "new":
            self._refuse_when_full(len(subject) + len(headers or b"") + len(data), subject)
        last_on_subject = 0
        if self._republish is not None and subject_matches(self._republish.source, subject):
            last_on_subject = store.last_seq_for(subject)
        try:
            if at_seq:
                store.skip_to(at_seq)
            msg = store.store(subject, headers, data, ts)
        except OSError as exc:  # (a full disk: nothing was stored)
            raise errors.STREAM_STORE_FAILED(err=str(exc)) from None
        for consumer in self.consumers.values():
            consumer.stored(msg.seq, subject)
        if self._republish is not None and self.republished is not None and \
                subject_matches(self._republish.source, subject):
            self._publish_again(msg, last_on_subject)
        if cfg["max_msgs"] > 0 or cfg["max_bytes"] > 0 or cfg["max_msgs_per_subject"] > 0:
            store.enforce(cfg["max_msgs"], cfg["max_bytes"], 0, cfg["max_msgs_per_subject"],
                          subject)
        if ttl > 0:
            heapq.heappush(self.ttls, (msg.ts + ttl * NS, msg.seq))
        elif ttl < 0:
            self.never.add(msg.seq)
        if msg_id:
            self.msg_ids[msg_id] = (msg.seq, msg.ts)
        self.last_msg_id = fields.get("nats-msg-id") or ""
        try:  # (removals: one that does not fit, a full disk, leaves the message stored)
            if rollup is not None:  # only this message stays (of its subject, or of all)
                self.purge(subject if rollup == "sub" else None, msg.seq, 0)
            if cfg["retention"] == "interest" and not any(
                    c.matches(subject) for c in self.consumers.values()):
                store.remove(msg.seq)  # nobody is interested: not kept (as the reference)
        except OSError as exc:
            log.warning("JetStream: stream %s: message %d stored, not all removals: %s",
                        self.name, msg.seq, exc)
        if self.stored is not None:
            self.stored(self, msg)
        ack = {"stream": cfg["name"], "seq": msg.seq}
        if self.domain:
            ack["domain"] = self.domain
        return ack

    def _domain(self) -> dict[str, str]:
        return {"domain": self.domain} if self.domain else {}

    def _publish_again(self, msg: StoredMsg, last_on_subject: int) -> None:
        """A stored message republished, with the reference's headers."""
        from ..server.gojson import go_time

        target = self._republish.apply(msg.subject.encode()).decode()
        if not is_valid_subject(target) or "*" in target or ">" in target:
            return
        headers_only = bool(self.config["republish"].get("headers_only"))
        added = (f"Nats-Stream: {self.name}\r\nNats-Subject: {msg.subject}\r\n"
                 f"Nats-Sequence: {msg.seq}\r\nNats-Time-Stamp: {go_time(msg.ts, utc=True)}\r\n"
                 f"Nats-Last-Sequence: {last_on_subject}\r\n")
        if headers_only:
            added += f"Nats-Msg-Size: {len(msg.data)}\r\n"
        base = msg.headers[:-2] if msg.headers else b"NATS/1.0\r\n"
        self.republished(target, base + added.encode() + b"\r\n",
                         b"" if headers_only else msg.data)

    def _judge(self, subject: str, fields: dict[str, str], headers: bytes | None
               ) -> dict[str, Any] | tuple[str | None, str | None, int, bytes | None]:
        """A publish's headers judged in the reference's order: Nats-Expected-Stream,
        Nats-TTL where TTLs are not allowed, the expected last sequences (on the subject,
        then of the stream), the duplicate window (a duplicate's PubAck is returned),
        Nats-Expected-Last-Msg-Id, Nats-Rollup, the TTL's value. What passes: the
        message's id, its rollup, its TTL (seconds; -1: never) and its headers (a TTL
        raised to the subject delete markers' rewritten)."""
        msg_id = fields.get("nats-msg-id") or None
        if msg_id is not None and len(fields) == 1:  # an id alone: nothing else to judge
            duplicate = self._duplicate(msg_id)
            return duplicate if duplicate is not None else (msg_id, None, 0, headers)
        expected = fields.get("nats-expected-stream")
        if expected and expected != self.name:
            raise errors.STREAM_NOT_MATCH()
        ttl, invalid = self._ttl_of(fields)
        self._check_last_sequences(subject, fields)
        if msg_id:
            duplicate = self._duplicate(msg_id)
            if duplicate is not None:
                return duplicate
        last_id = fields.get("nats-expected-last-msg-id")
        if last_id and last_id != self.last_msg_id:
            raise errors.STREAM_WRONG_LAST_MSG_ID(id=self.last_msg_id)
        rollup = self._rollup(fields)
        if invalid is not None:
            raise invalid
        return msg_id, rollup, ttl, self._marker_ttl(ttl, headers)

    def _ttl_of(self, fields: dict[str, str]) -> tuple[int, errors.ApiError | None]:
        """A publish's `Nats-TTL` in seconds (0: none, -1: never) and why its value is
        invalid (judged later); refused at once where TTLs are not allowed."""
        value = fields.get("nats-ttl")
        if value is None:
            return 0, None
        try:
            ttl, invalid = message_ttl(value), None
        except errors.ApiError as exc:
            ttl, invalid = 0, exc
        if ttl and not self.config.get("allow_msg_ttl"):
            raise errors.MESSAGE_TTL_DISABLED()
        return ttl, invalid

    def _marker_ttl(self, ttl: int, headers: bytes | None) -> bytes | None:
        """The headers with a TTL below the subject delete markers' raised to theirs."""
        marker_ttl = (self.config.get("subject_delete_marker_ttl") or 0) // NS
        if 0 < ttl < marker_ttl and self.config["max_msgs_per_subject"] != 1:
            return replace_header(headers or b"", "Nats-TTL", str(marker_ttl))
        return headers

    def _rollup(self, fields: dict[str, str]) -> str | None:
        rollup = fields.get("nats-rollup")
        if rollup is not None:
            if not self.config.get("allow_rollup_hdrs"):
                raise errors.STREAM_ROLLUP_FAILED(err="rollup not permitted")
            if rollup not in ("sub", "all"):
                raise errors.STREAM_ROLLUP_FAILED(err=f'rollup value invalid: "{rollup}"')
        return rollup

    def _duplicate(self, msg_id: str) -> dict[str, Any] | None:
        """The PubAck of a publish whose id is in the duplicate window (None: it is not)."""
        ids = self.msg_ids
        if ids and time.time_ns() >= self._ids_due:
            self._expire_ids()
        seen = ids.get(msg_id)
        if seen is None:
            return None
        return {"stream": self.name, "seq": seen[0], **self._domain(), "duplicate": True}

    def _copied_ttl(self, fields: dict[str, str]) -> int:
        """A mirrored message's TTL, kept where the mirror allows TTLs (0 where not, or
        where it cannot be read)."""
        if not self.config.get("allow_msg_ttl") or "nats-ttl" not in fields:
            return 0
        try:
            return message_ttl(fields["nats-ttl"])
        except errors.ApiError:
            return 0

    # -- expiry -------------------------------------------------------------------------------
    def expire(self, now: int | None = None) -> bool:
        """Remove what `max_age` and the messages' TTLs let go (leaving a subject delete
        marker where the stream asks for them); whether anything went."""
        now = time.time_ns() if now is None else now
        store, gone = self.store, False
        max_age = self.config["max_age"]
        if max_age and store.count:
            cutoff = now - max_age
            if not self.never:
                while store.count and store.first_ts() < cutoff:
                    self._expire_one(store.first_seq)
                    gone = True
            else:  # (past the never-expiring ones, up to the first one too young)
                for seq in range(store.first_seq, store.last_seq + 1):
                    msg = store.get(seq)
                    if msg is None:
                        continue
                    if msg.ts >= cutoff:
                        break
                    if seq not in self.never:
                        self._expire_one(seq)
                        gone = True
        ttls = self.ttls
        while ttls and ttls[0][0] <= now:
            _, seq = heapq.heappop(ttls)
            if store.subject_of(seq) is not None:
                self._expire_one(seq)
                gone = True
        return gone

    def next_expiry(self) -> int:
        """When (ns) the next message expires by its TTL or max_age; 0 if none will."""
        times = [self.ttls[0][0]] if self.ttls else []
        if self.config["max_age"] and self.store.count:
            times.append(self.store.first_ts() + self.config["max_age"])
        return min(times) if times else 0

    def _expire_one(self, seq: int) -> None:
        """Message `seq` expired: removed, or (the last of its subject, with subject delete
        markers on) replaced by a marker that rolls the subject up."""
        self.never.discard(seq)
        marker_ttl = (self.config.get("subject_delete_marker_ttl") or 0) // NS
        subject = self.store.subject_of(seq)
        if marker_ttl and subject is not None and self.store.subjects.get(subject) == 1:
            msg = self.store.get(seq)
            if msg is not None and not _is_delete_marker(msg.headers):
                from ..config.units import format_go_duration

                marker = (f"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: "
                          f"{format_go_duration(marker_ttl * NS)}\r\nNats-Rollup: sub\r\n\r\n")
                try:
                    self.publish(subject, marker.encode(), b"")
                    return
                except errors.ApiError:
                    pass  # (a stream that refuses it: the message just goes)
        self.store.remove(seq)

    def restore_msg_ids(self) -> None:
        """The duplicate window of a recovered stream, read again from the `Nats-Msg-Id` of
        the messages stored within it (newest first, back to the window's start), as the
        reference rebuilds it: a publish retried across a restart is still a duplicate."""
        window = self.config.get("duplicate_window") or 0
        if not window:
            return
        store, cutoff = self.store, time.time_ns() - window
        found: list[tuple[str, int, int]] = []
        for seq in range(store.last_seq, store.first_seq - 1, -1):
            msg = store.get(seq)
            if msg is None:
                continue
            if msg.ts < cutoff:
                break
            if msg.headers and b"Nats-Msg-Id" in msg.headers:
                msg_id = header_fields(msg.headers).get("nats-msg-id")
                if msg_id:
                    found.append((msg_id, seq, msg.ts))
        for msg_id, seq, ts in reversed(found):
            self.msg_ids.setdefault(msg_id, (seq, ts))
        self._ids_due = 0
        if found and found[0][1] == store.last_seq:
            self.last_msg_id = found[0][0]

    def restore_ttls(self) -> None:
        """The TTLs of a recovered stream's messages, read again from their headers."""
        if not self.config.get("allow_msg_ttl"):
            return
        store = self.store
        for seq in range(store.first_seq, store.last_seq + 1):
            msg = store.get(seq)
            if msg is None or not msg.headers or b"Nats-TTL" not in msg.headers:
                continue
            value = header_fields(msg.headers).get("nats-ttl")
            try:
                ttl = message_ttl(value) if value is not None else 0
            except errors.ApiError:
                continue
            if ttl > 0:
                heapq.heappush(self.ttls, (msg.ts + ttl * NS, seq))
            elif ttl < 0:
                self.never.add(seq)

    def purge(self, subject: str | None = None, upto: int = 0, keep: int = 0) -> int:
        """Remove messages (on `subject`, a filter, if given): those before sequence `upto`,
        or all but the last `keep`; how many went. A plain purge keeps the sequence."""
        store = self.store
        if subject is None and not upto and not keep:
            for consumer in self.consumers.values():
                consumer.recount()
            return int(store.purge())
        chosen = list(store.matching(store.first_seq, lambda found: subject is None
                                     or subject_matches(subject, found)))
        if upto:
            chosen = [seq for seq in chosen if seq < upto]
        elif keep:
            chosen = chosen[:-keep] if keep < len(chosen) else []
        for seq in chosen:
            store.remove(seq)
        return len(chosen)

    def commit(self) -> tuple[set[int], str]:
        """Write what this turn's publishes stored (a file stream's group commit); the
        sequences a failed write took back (their publishes are refused) and why."""
        try:
            self.store.commit()
        except CommitFailed as exc:
            lost = set(exc.lost)
            log.error("JetStream: stream %s: storing %d messages failed: %s", self.name,
                      len(lost), exc.strerror)
            self.msg_ids = OrderedDict((k, v) for k, v in self.msg_ids.items()
                                       if v[0] not in lost)
            self._ids_due = 0
            self.ttls = [entry for entry in self.ttls if entry[1] not in lost]
            heapq.heapify(self.ttls)
            self.never -= lost
            for consumer in self.consumers.values():
                consumer.recount()
            return lost, str(OSError(exc.errno, exc.strerror))
        return set(), ""

    def _removed(self, seq: int, subject: str) -> None:
        for consumer in self.consumers.values():
            consumer.removed(seq, subject)

    def acked(self, seq: int) -> None:
        """A consumer is done with message `seq`: a work queue forgets it; an interest
        stream once every consumer interested in it is done."""
        retention = self.config["retention"]
        if retention == "limits":
            return
        subject = self.store.subject_of(seq)
        if subject is None:
            return
        if retention == "workqueue" or all(c.has_acked(seq, subject)
                                           for c in self.consumers.values()):
            try:
                self.store.remove(seq)
            except OSError as exc:  # (a full disk: the message stays, the ack is taken)
                log.warning("JetStream: stream %s: acked message %d not removed: %s",
                            self.name, seq, exc)

    def _refuse_when_full(self, size: int, subject: str) -> None:
        cfg, store = self.config, self.store
        per_subject = cfg["max_msgs_per_subject"]
        if (cfg.get("discard_new_per_subject") and per_subject > 0
                and store.subjects.get(subject, 0) >= per_subject):
            raise errors.STREAM_STORE_FAILED(err="maximum messages per subject exceeded")
        if cfg["max_msgs"] > 0 and store.count >= cfg["max_msgs"]:
            raise errors.STREAM_STORE_FAILED(err="maximum messages exceeded")
        if cfg["max_bytes"] > 0 and store.bytes + size > cfg["max_bytes"]:
            raise errors.STREAM_STORE_FAILED(err="maximum bytes exceeded")

    def _check_last_sequences(self, subject: str, fields: dict[str, str]) -> None:
        """Nats-Expected-Last-Subject-Sequence (on its -Subject, if given), then
        Nats-Expected-Last-Sequence: a value that is no number matches no sequence."""
        per_subject = fields.get("nats-expected-last-subject-sequence")
        on_subject = fields.get("nats-expected-last-subject-sequence-subject")
        if per_subject:
            found = last_on(self.store, on_subject or subject)
            have = found.seq if found is not None else 0
            if _sequence(per_subject) != have:
                raise errors.STREAM_WRONG_LAST_SEQUENCE(seq=have)
        elif on_subject:
            raise errors.STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID()
        last = fields.get("nats-expected-last-sequence")
        if last and _sequence(last) != self.store.last_seq:
            raise errors.STREAM_WRONG_LAST_SEQUENCE(seq=self.store.last_seq)

    def _expire_ids(self) -> None:
        """The ids older than the duplicate window forgotten; when the next one goes noted."""
        window = self._window
        cutoff = time.time_ns() - window
        ids = self.msg_ids
        while ids:
            first = next(iter(ids))
            ts = ids[first][1]
            if ts >= cutoff:
                self._ids_due = ts + window
                return
            del ids[first]
        self._ids_due = 0

    # -- what it says of itself -----------------------------------------------------------------
    def state(self, subjects: dict[str, int] | None = None,
              details: bool = False) -> dict[str, Any]:
        """Its state as STREAM.INFO says it: with `subjects` (the counts asked for) and the
        deleted sequences when `details` are asked for."""
        from ..server.gojson import go_time

        store = self.store
        first = store.get(store.first_seq)
        state: dict[str, Any] = {
            "messages": store.count, "bytes": store.bytes,
            "first_seq": store.first_seq if store.count else store.last_seq + (
                1 if store.last_seq else 0),
            "first_ts": go_time(first.ts, utc=True) if first else ZERO_TIME,
            "last_seq": store.last_seq,
            "last_ts": go_time(store.last_ts, utc=True) if store.last_ts else ZERO_TIME,
        }
        if store.subjects:
            state["num_subjects"] = len(store.subjects)
        if subjects:
            state["subjects"] = subjects
        deleted = (store.last_seq - store.first_seq + 1 - store.count) if store.count else 0
        if deleted > 0:
            state["num_deleted"] = deleted
            if details:
                state["deleted"] = [seq for seq in range(store.first_seq, store.last_seq + 1)
                                    if store.subject_of(seq) is None]
        state["consumer_count"] = len(self.consumers)
        return state

    def subject_counts(self, subject_filter: str) -> dict[str, int]:
        """Messages per subject, of the subjects `subject_filter` matches."""
        return {subject: count for subject, count in self.store.subjects.items()
                if subject_matches(subject_filter, subject)}

    def info(self, with_config: bool = True) -> dict[str, Any]:
        from ..server.gojson import go_time

        out: dict[str, Any] = {}
        if with_config:
            out["config"] = self.config
        out["created"] = go_time(self.created, utc=True)
        out["state"] = self.state()
        if self.config.get("mirror"):
            out["mirror"] = self.links[0].info() if self.links else \
                {"name": self.config["mirror"].get("name"), "lag": 0, "active": -1}
        elif self.links:
            out["sources"] = [link.info() for link in self.links]
        return out


ZERO_TIME = "0001-01-01T00:00:00Z"
META_FILE = "meta.json"


def stored_message(msg: StoredMsg, with_headers: bool = True) -> dict[str, Any]:
    """A stored message as STREAM.MSG.GET answers it."""
    import base64

    from ..server.gojson import go_time

    out: dict[str, Any] = {"subject": msg.subject, "seq": msg.seq}
    if msg.headers and with_headers:
        out["hdrs"] = base64.b64encode(msg.headers).decode()
    if msg.data:
        out["data"] = base64.b64encode(msg.data).decode()
    out["time"] = go_time(msg.ts, utc=True)
    return out


def jetstream_fields(block: bytes) -> dict[str, str]:
    """The `Nats-*` fields of a publish's header block by lower-case name, each with its
    first value, as header_fields reads them (what a stream judges a publish by). A block
    whose only such field is its Nats-Msg-Id (a publish with an id, the common kind) is
    read without splitting it into lines."""
    lowered = block.lower()
    at = lowered.find(b"\r\nnats-msg-id:")
    if at >= 0 and lowered.count(b"nats-") == 1:
        end = block.find(b"\r\n", at + 14)
        value = block[at + 14:end] if end >= 0 else block[at + 14:]
        return {"nats-msg-id": value.strip().decode(errors="replace")}
    if b"nats-" not in lowered:
        return {}
    return {name: value for name, value in header_fields(block).items()
            if name.startswith("nats-")}


def _sequence(value: str) -> int:
    """An expected sequence header's value; -1 (no sequence) where it is no number."""
    return int(value) if value.isascii() and value.isdigit() else -1


def _is_delete_marker(headers: bytes | None) -> bool:
    """A subject delete marker, or a KV purge (which the reference counts as one): no
    marker is put in its place when it expires."""
    if not headers:
        return False
    fields = header_fields(headers)
    return bool(fields.get("nats-marker-reason")) or fields.get("kv-operation") == "PURGE"


def dumps(obj: Any) -> bytes:
    from ..server.gojson import go_json

    return go_json(obj)


