"""An account's subject mappings at run time: the subject a client's message is delivered
on, as nats-server's selectMappedSubject chooses it (server/accounts.go).

A mapping's destinations are weighted: each takes its percentage of the messages, and what
they leave of 100% keeps the published subject (unless the source is itself one of the
destinations: then that share is lost, the message published to the empty subject, which
nobody receives, as on the reference). Destinations scoped to a cluster replace the others
on a server of that cluster. A literal source is found with one dict lookup; wildcard
sources are tried in the order they were configured. Only messages from clients are mapped
(client.py, and the requests a service import carries into the exporting account): a
message from a route was mapped where it entered.

As the reference, a literal source's transform is given no tokens of the subject: its
`{{partition(n)}}` hashes the empty string (the reference does that when the literal
mapping is the first it tries).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..protocol.transform import Transform, TransformError, tokenized, validate_mapping

if TYPE_CHECKING:
    from ..config.accounts import MapDest, Mapping

log = logging.getLogger("tidings.server")

_NO_TOKENS: list[bytes] = []
# (cumulative weight, transform), by weight: a draw below the bound takes that destination.
Weighted = list[tuple[int, Transform]]


class _Mapping:
    """One source and its destinations."""

    __slots__ = ("tokens", "open", "dests", "by_cluster", "only", "cluster")

    def __init__(self, source: str, dests: Weighted, by_cluster: dict[str, Weighted],
                 cluster: Callable[[], str]) -> None:
        self.tokens = source.encode().split(b".")
        self.open = self.tokens[-1] == b">"  # matches subjects of more tokens
        self.dests = dests
        self.by_cluster = by_cluster
        self.cluster = cluster  # this server's cluster name, asked only when scoped
        # The one destination of a plain mapping, which every message takes.
        self.only = dests[0][1] if len(dests) == 1 and dests[0][0] == 100 and not by_cluster \
            else None

    def pick(self, tokens: list[bytes]) -> bytes:
        only = self.only
        if only is not None:
            return only.apply_tokens(tokens)
        dests = self.dests
        if self.by_cluster:
            dests = self.by_cluster.get(self.cluster()) or dests
        if len(dests) == 1 and dests[0][0] == 100:
            return dests[0][1].apply_tokens(tokens)
        draw = int(random.random() * 100)
        for bound, transform in dests:
            if draw < bound:
                return transform.apply_tokens(tokens)
        return b""  # the share of a source among its own destinations: lost


class SubjectMappings:
    """`select(subject)`: the subject a message published to `subject` goes to, or None
    when no mapping's source matches it."""

    __slots__ = ("literal", "wildcard")

    def __init__(self) -> None:
        self.literal: dict[bytes, _Mapping] = {}
        self.wildcard: list[_Mapping] = []

    def select(self, subject: bytes) -> bytes | None:
        found = self.literal.get(subject)
        if found is not None:
            return found.pick(_NO_TOKENS)
        if not self.wildcard:
            return None
        tokens = subject.split(b".")
        n = len(tokens)
        for mapping in self.wildcard:
            pattern = mapping.tokens
            if (n >= len(pattern) if mapping.open else n == len(pattern)) and \
                    _subset(tokens, pattern):
                return mapping.pick(tokens)
        return None


def _subset(tokens: list[bytes], pattern: list[bytes]) -> bool:
    """The published subject's tokens fall within `pattern`, a valid subject with no fewer
    tokens (the reference's isSubsetMatchTokenized: a `*` or `>` published is matched
    only by the same wildcard)."""
    for i, want in enumerate(pattern):
        if want == b">":
            return True
        token = tokens[i]
        if not token or token == b">":
            return False
        if token == b"*":
            if want != b"*":
                return False
        elif want != b"*" and want != token:
            return False
    return len(tokens) == len(pattern)


def build(mappings: Iterable[Mapping], cluster: Callable[[], str],
          account: str) -> SubjectMappings | None:
    """The run-time form of an account's mappings (None: it has none). A mapping the
    reference would not add (one of an account JWT: the file's were checked) is left out
    and logged."""
    out = SubjectMappings()
    for mapping in mappings:
        try:
            built = _build_one(mapping, cluster)
        except (TransformError, ValueError) as exc:
            log.warning("account %s: subject mapping of %r ignored: %s", account,
                        mapping.source, exc)
            continue
        tokens = mapping.source.split(".")
        if "*" in tokens or tokens[-1] == ">":
            out.wildcard.append(built)
        else:
            out.literal[mapping.source.encode()] = built
    return out if out.literal or out.wildcard else None


def _build_one(mapping: Mapping, cluster: Callable[[], str]) -> _Mapping:
    """The reference's AddWeightedMappings: each destination's transform, the source's own
    share added where the weights leave some, the bounds accumulated."""
    source = mapping.source
    seen: set[str] = set()
    totals: dict[str, int] = {}
    plain: list[tuple[int, Transform]] = []
    scoped: dict[str, list[tuple[int, Transform]]] = {}
    for dest in mapping.destinations:
        _check(dest, seen, totals)
        transform = validate_mapping(source, dest.subject)
        if dest.cluster:
            scoped.setdefault(dest.cluster, []).append((dest.weight, transform))
        else:
            plain.append((dest.weight, transform))
    own = source in seen
    return _Mapping(source, _weighted(source, plain, own),
                    {name: _weighted(source, dests, own) for name, dests in scoped.items()},
                    cluster)


def _check(dest: MapDest, seen: set[str], totals: dict[str, int]) -> None:
    if dest.subject in seen:
        raise ValueError(f"duplicate entry for {dest.subject!r}")
    seen.add(dest.subject)
    if not dest.subject:
        raise ValueError("an empty destination")
    if not 0 <= dest.weight <= 100:
        raise ValueError("individual weights need to be <= 100")
    totals[dest.cluster] = totals.get(dest.cluster, 0) + dest.weight
    if totals[dest.cluster] > 100:
        raise ValueError("total weight needs to be <= 100")


def _weighted(source: str, dests: list[tuple[int, Transform]], own: bool) -> Weighted:
    """Destinations with the source's own share added (unless it is one of them) and their
    weights accumulated, lightest first (a stable sort, as the reference's of so few)."""
    total = sum(weight for weight, _ in dests)
    if total != 100 and not own:
        keep = Transform(source.encode(), tokenized(source).encode())
        dests = [*dests, (100 - total if dests else 100, keep)]
    bound, out = 0, []
    for weight, transform in sorted(dests, key=lambda d: d[0]):
        bound += weight
        out.append((bound, transform))
    return out
