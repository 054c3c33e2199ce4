"""Mirrors and sources: a stream that copies the messages of other streams of its account.

A mirror (`mirror: {name, ...}`) keeps its origin's messages as they are: the same
sequences (gaps included), subjects, headers and times; it takes no publishes of its own.
A source (`sources: [{name, ...}]`) appends the origin's messages to the stream with
sequences of its own, each with a `Nats-Stream-Source: <origin> <seq> <filter> <dest>
<subject> <ident>` header, as the reference writes it (its `filter_subject` or
`subject_transforms` choose and rename what is copied).

On one server the copy needs no consumer over the wire: each Link reads its origin's store
from where it stands (a catch-up in bounded slices, one per turn of the loop) and, once
caught up, takes each message the origin stores as it is stored. Where a link stands is read
back from the stream itself after a restart (a mirror's last sequence; a source's last
`Nats-Stream-Source` header naming it), so nothing else is kept.

A mirror or source with `external: {api, deliver}` names an origin reached through an API
prefix (another account's `$JS.API`, imported): its link is external.py's, which goes
through a consumer as the reference does; the Copier makes it through `external`.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..protocol.headers import header_fields
from ..protocol.subjects import is_valid_subject, subject_matches, subjects_collide
from ..server.godecode import go_quote
from ..server.gojson import parse_go_time
from . import errors
from .memstore import StoredMsg
from .stream import transform_for, valid_asset_name

if TYPE_CHECKING:
    from .stream import Stream

log = logging.getLogger("tidings.jetstream")

SOURCE_HEADER = "Nats-Stream-Source"
CATCH_UP_SLICE = 1000  # messages a link copies in one turn of the loop while catching up
_DROPPED_PREFIXES = (b"nats-expected-", b"nats-batch-")
JS_API = "$JS.API"  # what an external API prefix must not overlap
_HASH_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


# -- configuration ------------------------------------------------------------------------

def check(cfg: dict[str, Any], origin_config: Any) -> None:
    """The reference's checks of a configuration's mirror and sources, in its order;
    `origin_config(name)` is the configuration of a stream of the account (None if none).
    A mirror inherits its origin's allow_direct as mirror_direct. An external origin
    (`external`: in another account or domain) is not looked for here; its prefixes are
    checked instead."""
    origins: list[dict[str, Any]] = []  # the configurations of the local origins there are
    externals: list[dict[str, str]] = []
    mirror = cfg.get("mirror")
    if mirror:
        _check_mirror(cfg, mirror, origin_config)
        _gather(mirror, origin_config, origins, externals)
    inames: set[str] = set()
    for source in cfg.get("sources") or []:
        if not source or not valid_asset_name(source.get("name") or ""):
            raise errors.SOURCE_INVALID_STREAM_NAME()
        iname = index_name(source)
        if iname in inames:
            raise errors.SOURCE_DUPLICATE_DETECTED()
        inames.add(iname)
        transforms = source.get("subject_transforms") or []
        if source.get("filter_subject") and transforms:
            raise errors.SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED()
        for tr in transforms:
            _check_transform(tr, errors.SOURCE_INVALID_SUBJECT_FILTER,
                             errors.SOURCE_INVALID_TRANSFORM_DESTINATION)
        for i, tr in enumerate(transforms):
            for j, other in enumerate(transforms):
                if i != j and _subset(tr.get("src") or ">", other.get("src") or ">"):
                    raise errors.SOURCE_OVERLAPPING_SUBJECT_FILTERS()
        _refuse_unbuilt(source)
        _gather(source, origin_config, origins, externals)
    _check_prefixes(externals, [s for origin in origins for s in origin.get("subjects") or []])


def external_of(spec: dict[str, Any]) -> dict[str, str] | None:
    """A mirror's or source's `external` (its api and deliver prefixes, each "" when not
    given, as the reference echoes them), None for an origin in the stream's own account."""
    ext = spec.get("external")
    if not isinstance(ext, dict):
        return None
    return {"api": str(ext.get("api") or ""), "deliver": str(ext.get("deliver") or "")}


def _gather(spec: dict[str, Any], origin_config: Any, origins: list[dict[str, Any]],
            externals: list[dict[str, str]]) -> None:
    """A local origin's configuration (if it exists), or an external one's prefixes."""
    ext = external_of(spec)
    if ext is not None:
        spec["external"] = ext
        externals.append(ext)
        return
    origin = origin_config(spec.get("name") or "")
    if origin is not None:
        origins.append(origin)


def _check_prefixes(externals: list[dict[str, str]], origin_subjects: list[str]) -> None:
    """The reference's checks of external prefixes: a deliver prefix a literal subject
    that no local origin's subject would take again under it, an API prefix a literal
    subject apart from `$JS.API`."""
    for ext in externals:
        prefix = ext["deliver"]
        if not prefix:
            continue
        if not literal_subject(prefix):
            raise errors.STREAM_INVALID_EXTERNAL_DELIVERY_SUBJ(prefix=prefix)
        for subject in origin_subjects:
            if subjects_collide(subject, f"{prefix}.{subject}"):
                raise errors.STREAM_EXTERNAL_DEL_PREFIX_OVERLAPS(prefix=prefix, subject=subject)
    for ext in externals:
        prefix = ext["api"]
        if not prefix:
            continue
        if not literal_subject(prefix):
            raise errors.STREAM_INVALID_CONFIG(
                err=f"stream external api prefix {go_quote(prefix)} must be a valid subject "
                    "without wildcards")
        if subjects_collide(prefix, JS_API):
            raise errors.STREAM_EXTERNAL_API_OVERLAP(prefix=prefix, subject=JS_API)


def literal_subject(subject: str) -> bool:
    """A subject a message may be published on: valid, without wildcards."""
    return is_valid_subject(subject) and not any(t in ("*", ">") for t in subject.split("."))


def _check_mirror(cfg: dict[str, Any], mirror: dict[str, Any], origin_config: Any) -> None:
    if cfg.get("first_seq"):
        raise errors.MIRROR_WITH_FIRST_SEQ()
    if cfg.get("subjects"):
        raise errors.MIRROR_WITH_SUBJECTS()
    if cfg.get("sources"):
        raise errors.MIRROR_WITH_SOURCES()
    transforms = mirror.get("subject_transforms") or []
    if mirror.get("filter_subject") and transforms:
        raise errors.MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED()
    if cfg.get("subject_delete_marker_ttl"):
        raise errors.STREAM_INVALID_CONFIG(err="subject delete markers forbidden on mirrors")
    for i, tr in enumerate(transforms):
        _check_transform(tr, errors.MIRROR_INVALID_SUBJECT_FILTER,
                         errors.MIRROR_INVALID_TRANSFORM_DESTINATION)
        for j, other in enumerate(transforms):
            if i != j and subjects_collide(tr.get("src") or ">", other.get("src") or ">"):
                raise errors.MIRROR_OVERLAPPING_SUBJECT_FILTERS()
    _refuse_unbuilt(mirror)
    if external_of(mirror) is not None:
        return  # (the reference neither checks its name nor looks for it here)
    if not valid_asset_name(mirror.get("name") or ""):
        raise errors.MIRROR_INVALID_STREAM_NAME()
    origin = origin_config(mirror["name"])
    if origin is not None:
        size, theirs = cfg.get("max_msg_size") or -1, origin.get("max_msg_size") or -1
        if size > 0 and theirs > 0 and size < theirs:
            raise errors.MIRROR_MAX_MESSAGE_SIZE_TOO_BIG()
        cfg["mirror_direct"] = bool(origin.get("allow_direct"))


def _refuse_unbuilt(spec: dict[str, Any]) -> None:
    if spec.get("consumer"):
        raise errors.STREAM_INVALID_CONFIG(
            err="stream source consumer is not supported by tidings yet")


def _check_transform(tr: dict[str, Any], bad_filter: Any, bad_dest: Any) -> None:
    src, dest = tr.get("src") or "", tr.get("dest") or ""
    if src and not is_valid_subject(src):
        raise bad_filter(err=f"invalid subject {src}")
    if dest and transform_for(src or ">", dest) is None:
        raise bad_dest(err="invalid mapping destination")


def _subset(subject: str, pattern: str) -> bool:
    """Whether every subject `subject` matches, `pattern` matches too."""
    return subject_matches(pattern, subject)


def index_name(spec: dict[str, Any]) -> str:
    """The reference's index name of a source: its stream (with a hash of its API prefix
    when external: the same name in another account or domain is another origin), and its
    filters and their destinations (each ">" when not given)."""
    transforms = spec.get("subject_transforms") or []
    if transforms:
        src = "\f".join(tr.get("src") or ">" for tr in transforms)
        dest = "\f".join(tr.get("dest") or ">" for tr in transforms)
    else:
        src, dest = spec.get("filter_subject") or ">", ">"
    name = spec["name"]
    ext = external_of(spec)
    if ext is not None:
        name = f"{name}:{short_hash(ext['api'])}"
    return f"{name} {src} {dest}"


def short_hash(text: str) -> str:
    """The reference's 8-character hash of a name (SHA-256, each of the first 8 bytes as
    one of 62 digits)."""
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(_HASH_DIGITS[b % len(_HASH_DIGITS)] for b in digest[:8])


# -- one stream copying another ---------------------------------------------------------------

class Link:
    """`target`'s copying of the stream named in `spec` (its mirror, or one of its sources):
    which of the origin's messages it takes, as what subject, and where it stands."""

    def __init__(self, target: Stream, spec: dict[str, Any], mirror: bool) -> None:
        self.target = target
        self.spec = spec
        self.mirror = mirror
        self.origin_name: str = spec["name"]
        self.iname = index_name(spec)
        self.filters: list[tuple[str, Any]] = []  # (filter, its transform or None)
        for tr in spec.get("subject_transforms") or []:
            src, dest = tr.get("src") or ">", tr.get("dest") or ""
            self.filters.append((src, transform_for(src, dest) if dest else None))
        if spec.get("filter_subject"):
            self.filters.append((spec["filter_subject"], None))
        self.next_seq = 0  # the origin's sequence it copies next (0: not known yet)
        self.active = 0  # when it last copied (monotonic ns), 0 never
        self.copied = 0  # the origin's sequence it last copied
        self.origin: Stream | None = None
        self.account: Any = None  # the target's (and origin's) account (Copier.attach)
        self.catching_up = False
        self.error: dict[str, Any] | None = None  # why it cannot copy now (as the API said)

    def subject_for(self, subject: str) -> str | None:
        """The subject a message on `subject` is copied as; None if it is not taken."""
        if not self.filters:
            return subject
        for src, transform in self.filters:
            if subject_matches(src, subject):
                if transform is None:
                    return subject
                return transform.apply(subject.encode()).decode()
        return None

    def start(self, origin: Stream) -> None:
        """Where it starts in `origin`: after what the target already holds of it, else
        at the configured start (sequence or time), else at the origin's first message."""
        self.origin = origin
        if self.next_seq:
            return
        held = self._held()
        if held:
            self.next_seq = held + 1
            return
        spec, store = self.spec, origin.store
        if spec.get("opt_start_seq"):
            self.next_seq = max(int(spec["opt_start_seq"]), store.first_seq)
        elif spec.get("opt_start_time"):
            self.next_seq = store.first_at(parse_go_time(str(spec["opt_start_time"])))
        else:
            self.next_seq = store.first_seq

    def _held(self) -> int:
        """The last origin sequence the target holds from this link (0: none)."""
        store = self.target.store
        if self.mirror:
            return store.last_seq if store.count or store.last_seq >= store.first_seq else 0
        for seq in range(store.last_seq, store.first_seq - 1, -1):
            msg = store.get(seq)
            if msg is None or not msg.headers:
                continue
            value = header_fields(msg.headers).get(SOURCE_HEADER.lower(), "")
            parts = value.split(" ")
            if len(parts) >= 4 and f"{parts[0]} {parts[2]} {parts[3]}" == self.iname:
                return int(parts[1]) if parts[1].isdigit() else 0
        return 0

    def lag(self) -> int:
        """What it has not looked at yet of its origin (0 before it first copied)."""
        origin = self.origin
        if origin is None or not self.active:
            return 0
        return max(0, origin.store.last_seq - self.next_seq + 1)

    def info(self) -> dict[str, Any]:
        """The reference's StreamSourceInfo."""
        out: dict[str, Any] = {"name": self.origin_name}
        ext = external_of(self.spec)
        if ext is not None:
            out["external"] = ext
        out["lag"] = self.lag()
        if not self.mirror and self.copied:
            out["seq"] = self.copied
        out["active"] = time.monotonic_ns() - self.active if self.active else -1
        if self.error is not None:
            out["error"] = self.error
        if self.spec.get("filter_subject"):
            out["filter_subject"] = self.spec["filter_subject"]
        if self.spec.get("subject_transforms"):
            out["subject_transforms"] = self.spec["subject_transforms"]
        return out

    def copy(self, msg: StoredMsg) -> tuple[str, bytes | None, bytes, dict[str, Any]] | None:
        """What storing `msg` in the target takes (subject, headers, data, how), or None
        when the link does not take it."""
        subject = self.subject_for(msg.subject)
        if subject is None:
            return None
        if self.mirror:
            return subject, without_headers(msg.headers, False), msg.data, \
                {"ts": msg.ts, "at_seq": msg.seq}
        if msg.headers and _sourced_from(msg.headers, self.target.name):
            return None  # (a copy of its own message coming round a cycle of sources)
        origin = self.origin
        ident = identity(origin) if origin is not None else ""
        return subject, self.source_headers(msg.headers, msg.seq, msg.subject, ident), \
            msg.data, {}

    def source_headers(self, headers: bytes | None, seq: int, subject: str,
                       ident: str) -> bytes:
        """A sourced message's headers: the origin's, less those not copied, and the
        source header naming the link (its index name), the origin's sequence and subject,
        and the origin's identity (if known)."""
        name, src, dest = self.iname.split(" ")
        value = f"{name} {seq} {src} {dest} {subject} {ident}".rstrip()
        return (without_headers(headers, True) or b"NATS/1.0\r\n\r\n")[:-2] + \
            f"{SOURCE_HEADER}: {value}\r\n\r\n".encode()

    def stop(self) -> None:
        """It copies no more (a local link has nothing of its own to end)."""


def without_headers(headers: bytes | None, sourced: bool) -> bytes | None:
    """A copy's headers without the origin's Nats-Expected-* and Nats-Batch-* headers
    (not checked again in the copy), and, in a source's copy, the origin's own source
    header; None when none is left."""
    if not headers:
        return None
    lowered = headers.lower()
    if not sourced and not any(prefix in lowered for prefix in _DROPPED_PREFIXES):
        return headers
    lines = headers.split(b"\r\n")
    source = SOURCE_HEADER.lower().encode() + b":"
    kept = [line for line in lines[1:] if line and not (
        (sourced and line.lower().startswith(source))
        or line.lower().startswith(_DROPPED_PREFIXES))]
    if not kept:
        return None
    return b"\r\n".join([lines[0], *kept]) + b"\r\n\r\n"


def _sourced_from(headers: bytes, name: str) -> bool:
    value = header_fields(headers).get(SOURCE_HEADER.lower(), "")
    return value.split(" ", 1)[0] == name


def identity(stream: Stream) -> str:
    """A stream's identity as a source header names it: the same stream, the same name;
    a stream made again under the name, another."""
    digest = hashlib.sha256(f"{stream.name} {stream.created}".encode()).digest()
    return base64.b64encode(digest, b"-_").decode()[:8]


# -- the links of one JetStream -------------------------------------------------------------------

StoreCopy = Callable[[Any, "Stream", str, "bytes | None", bytes, dict[str, Any]], None]
# (account, target, spec, mirror) -> the started link of an external origin (external.py)
ExternalLinks = Callable[[Any, "Stream", dict[str, Any], bool], Link]


class Copier:
    """Which streams copy which (by account and origin name), each origin's stored messages
    handed on to the links caught up with it, catch-ups run a slice per turn (`soon`).
    An external origin's link is `external`'s (none: such a link copies nothing)."""

    def __init__(self, store_copy: StoreCopy, soon: Callable[[Callable[[], None]], None],
                 external: ExternalLinks | None = None) -> None:
        self.store_copy = store_copy
        self.soon = soon
        self.external = external
        self.links: dict[tuple[Any, str], list[Link]] = {}

    def attach(self, account: Any, target: Stream, streams: dict[str, Stream]) -> None:
        """`target`'s links, made from its configuration (a create, update or recovery)."""
        self.detach(account, target)
        cfg = target.config
        specs = [(cfg["mirror"], True)] if cfg.get("mirror") else \
            [(spec, False) for spec in cfg.get("sources") or []]
        for spec, mirror in specs:
            if external_of(spec) is not None:
                target.links.append(self.external(account, target, spec, mirror)
                                    if self.external is not None else Link(target, spec, mirror))
                continue
            link = Link(target, spec, mirror)
            link.account = account
            target.links.append(link)
            self.links.setdefault((account, link.origin_name), []).append(link)
            origin = streams.get(link.origin_name)
            if origin is not None and origin is not target:
                self._begin(account, link, origin)

    def detach(self, account: Any, target: Stream) -> None:
        for link in target.links:
            link.stop()
            links = self.links.get((account, link.origin_name), [])
            if link in links:
                links.remove(link)
            if not links and link.origin is not None:
                link.origin.stored = None  # (nobody copies it any more)
            link.origin = None
        target.links = []

    def origin_added(self, account: Any, origin: Stream) -> None:
        """A stream others copy exists now (created, or recovered after them)."""
        for link in self.links.get((account, origin.name), []):
            if link.target is not origin:
                self._begin(account, link, origin)

    def origin_removed(self, account: Any, origin: Stream) -> None:
        """A stream others copy is gone: they keep what they have and wait for it."""
        for link in self.links.get((account, origin.name), []):
            if link.origin is origin:
                link.origin, link.next_seq = None, 0

    def stored(self, account: Any, origin: Stream, msg: StoredMsg) -> None:
        """`origin` stored `msg`: copied at once by the links caught up with it."""
        for link in list(self.links.get((account, origin.name), ())):
            if link.origin is not origin or link.catching_up:
                continue
            if msg.seq == link.next_seq:
                self._copy(link, msg)
            elif msg.seq > link.next_seq:
                self._catch_up_soon(link)

    def _begin(self, account: Any, link: Link, origin: Stream) -> None:
        """`link` copies `origin` from now on: told of what it stores (a stream nobody
        copies is told nothing: its publishes pay nothing for this)."""
        link.start(origin)
        origin.stored = lambda stream, msg: self.stored(account, stream, msg)
        self._catch_up_soon(link)

    def _catch_up_soon(self, link: Link) -> None:
        if not link.catching_up:
            link.catching_up = True
            self.soon(lambda: self._catch_up(link))

    def _catch_up(self, link: Link) -> None:
        """One slice of what the origin holds beyond the link, then the next turn's."""
        link.catching_up = False
        origin = link.origin
        if origin is None:
            return
        store = origin.store
        link.next_seq = max(link.next_seq, store.first_seq)
        steps = 0
        while link.next_seq <= store.last_seq and steps < CATCH_UP_SLICE:
            msg = store.get(link.next_seq)
            steps += 1
            if msg is None:
                link.next_seq += 1
            else:
                self._copy(link, msg)
        if link.next_seq <= store.last_seq:
            self._catch_up_soon(link)

    def _copy(self, link: Link, msg: StoredMsg) -> None:
        link.next_seq = msg.seq + 1
        link.active = time.monotonic_ns()
        copy = link.copy(msg)
        if copy is None:
            return
        link.copied = msg.seq
        try:
            self.store_copy(link.account, link.target, *copy)
        except errors.ApiError as exc:  # (refused by the target: the copy goes on past it)
            log.warning("JetStream: stream %s: message %d of %s not copied: %s",
                        link.target.name, msg.seq, link.origin_name, exc.description)
