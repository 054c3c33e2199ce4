"""The subject index: which subscriptions match a published subject.

Literal subscriptions live in a dict keyed by subject; wildcard subscriptions in a token trie.
Every bucket is an insertion-ordered dict, so removing one of 50,000 subscriptions on a
subject is O(1). Matching walks the trie with an explicit stack: a subject of thousands of
tokens costs no recursion.

`match` answers from a bounded result cache (`cache`, which the parser also reads to skip
publishes nobody listens to), so a publish to a known subject costs one dict lookup (the
routing path reads `cache` itself and calls `compute` on a miss). The
cached subjects are indexed by token in a second trie, so an insert or remove drops exactly
the entries it affects by walking its pattern through that trie: its cost follows the
entries it matches, never the size of the cache.

A subject used once (a request's or a PubAck's reply, `<inbox>.<n>`) is not cached, but
what the wildcard subscriptions give it is, by the subject without its last token, when a
`*` took that token (`<inbox>.*`): the trie gives every `<prefix>.<token>` the same
subscriptions unless `<token>` is the last token of a wildcard subscription (`a.*.c`) or
the subject is subscribed to literally too, so such a subject costs a few dict lookups
instead of a walk of the trie (`_by_prefix`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..protocol.subjects import has_wildcard

# A match result: (plain subscriptions, queue groups, remote interest), each group a tuple of
# subscriptions. The first two hold local subscriptions (and groups) only; the third is None
# unless a route has interest (see RemoteInterest).
Result = tuple[
    tuple["Subscription", ...], tuple[tuple["Subscription", ...], ...], "RemoteInterest | None"
]
EMPTY_RESULT: Result = ((), (), None)
# Cached results; when full the cache starts over (rebuilt on demand by later publishes).
MAX_CACHE = 4096
# A batch removal larger than this drops the whole cache instead of its entries one by one.
BATCH_INVALIDATE = 16

Bucket = dict["Subscription", None]


class Subscription:
    """One SUB of one client. `sid_sp` (" <sid> ") is pre-encoded for MSG frames.

    `guard`, when set, says whether a message on a given subject may reach this (wildcard)
    subscription at all: its client's permissions. The index asks it when it builds a
    subject's result, so a refused subject costs nothing per message."""

    __slots__ = (
        "client", "subject", "queue", "sid", "sid_sp", "max", "delivered", "closed", "weight",
        "guard",
    )

    def __init__(self, client: Any, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        self.client = client
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.sid_sp = b" " + sid + b" "
        self.max = 0
        self.delivered = 0
        self.closed = False
        self.weight = 1  # the queue members a remote subscription stands for
        self.guard: Callable[[bytes, bytes | None], bool] | None = None


class RemoteInterest:
    """Where routes come in: `plain` holds one subscription per route with plain interest
    (the first in match order); `groups` the queue groups with a member on another server,
    each with all its members, a route's repeated by its weight (the members it stands for),
    so that picking one at random picks each member of the cluster alike, as the reference
    does. `relays`: subscriptions that carry the message into another account (accounts.py)."""

    __slots__ = ("plain", "groups", "relays")

    def __init__(
        self, plain: tuple[Subscription, ...], groups: tuple[tuple[Subscription, ...], ...],
        relays: tuple[Subscription, ...] = (),
    ) -> None:
        self.plain = plain
        self.groups = groups
        self.relays = relays


def split_remote(
    plain: list[Subscription], groups: dict[bytes, list[Subscription]]
) -> Result:
    """A result from subscriptions of which some are remote (their client is a route)."""
    local: list[Subscription] = []
    routes: dict[Any, Subscription] = {}
    relays: list[Subscription] = []
    for sub in plain:
        client = sub.client
        if client.is_route:
            routes.setdefault(client, sub)
        elif client.is_relay:
            relays.append(sub)
        else:
            local.append(sub)
    local_groups: list[tuple[Subscription, ...]] = []
    mixed: list[tuple[Subscription, ...]] = []
    for members in groups.values():
        if not any(sub.client.is_route for sub in members):
            local_groups.append(tuple(members))
            continue
        weighted: list[Subscription] = []
        for sub in members:
            if sub.client.is_route and sub.weight > 1:
                weighted.extend([sub] * sub.weight)
            else:
                weighted.append(sub)
        mixed.append(tuple(weighted))
    remote = (RemoteInterest(tuple(routes.values()), tuple(mixed), tuple(relays))
              if routes or mixed or relays else None)
    if not (local or local_groups or remote):
        return EMPTY_RESULT
    return tuple(local), tuple(local_groups), remote


class _Node:
    __slots__ = ("children", "pwc", "fwc", "subs")

    def __init__(self) -> None:
        self.children: dict[bytes, _Node] = {}
        self.pwc: _Node | None = None
        self.fwc: Bucket = {}
        self.subs: Bucket = {}

    def empty(self) -> bool:
        return not (self.children or self.pwc or self.fwc or self.subs)


class _CacheIndex:
    """The cached subjects as a token trie: nested dicts, the key None marking a subject's end.

    Subjects with an empty token are not indexed: they match nothing, whatever is subscribed.
    """

    __slots__ = ("root",)

    def __init__(self) -> None:
        self.root: dict[Any, Any] = {}

    def add(self, subject: bytes) -> None:
        node = self.root
        for tok in subject.split(b"."):
            nxt = node.get(tok)
            if nxt is None:
                nxt = node[tok] = {}
            node = nxt
        node[None] = subject

    def discard(self, subject: bytes) -> None:
        path: list[tuple[dict[Any, Any], bytes]] = []
        node = self.root
        for tok in subject.split(b"."):
            nxt = node.get(tok)
            if nxt is None:
                return
            path.append((node, tok))
            node = nxt
        node.pop(None, None)
        for parent, tok in reversed(path):
            if parent[tok]:
                return
            del parent[tok]

    def matching(self, pattern: bytes) -> list[bytes]:
        """The indexed subjects that the (wildcard or literal) `pattern` matches."""
        toks = pattern.split(b".")
        n = len(toks)
        found: list[bytes] = []
        stack: list[tuple[dict[Any, Any], int]] = [(self.root, 0)]
        while stack:
            node, i = stack.pop()
            if i == n:
                subject = node.get(None)
                if subject is not None:
                    found.append(subject)
                continue
            tok = toks[i]
            if tok == b">":
                # Every subject below, at any depth of one token or more.
                below = [child for key, child in node.items() if key is not None]
                while below:
                    sub_node = below.pop()
                    for key, child in sub_node.items():
                        if key is None:
                            found.append(child)
                        else:
                            below.append(child)
            elif tok == b"*":
                stack.extend((child, i + 1) for key, child in node.items() if key is not None)
            else:
                child = node.get(tok)
                if child is not None:
                    stack.append((child, i + 1))
        return found


class Sublist:
    """Subscriptions indexed by subject, with a cache of match results."""

    def __init__(self) -> None:
        self._literal: dict[bytes, Bucket] = {}
        self._root = _Node()
        self._wildcards = 0
        self.cache: dict[bytes, Result] = {}  # the same dict for the server's lifetime
        self._cached = _CacheIndex()
        self._seen: dict[bytes, None] = {}  # subjects computed once, not cached yet
        # The trie's result for `<prefix>.<token>`, by prefix, for a token that is no
        # wildcard subscription's last token (those counted in `_last_tokens`); dropped
        # whenever a wildcard subscription comes or goes (see _by_prefix).
        self._prefixes: dict[bytes, Result] = {}
        self._heads: set[int] = set()  # their first bytes (a subject of none is not looked up)
        self._last_tokens: dict[bytes, int] = {}
        self.count = 0
        # For /subsz: subscriptions ever inserted and removed, results computed (cache
        # misses), and lookups through match (the routing path's are its messages).
        self.inserts = 0
        self.removes = 0
        self.computed = 0
        self.asked = 0
        self.remote_count = 0  # subscriptions of routes (remote interest)
        self.guarded = 0  # subscriptions with a guard (permissions), see Subscription
        # Called with (subscription, added) after each insert and removal: the cluster
        # propagates local interest to routes this way.
        self.watcher: Callable[[Subscription, bool], None] | None = None

    def insert(self, sub: Subscription) -> None:
        subject = sub.subject
        wildcard = has_wildcard(subject)
        if wildcard:
            node = self._root
            tokens = subject.split(b".")
            for tok in tokens[:-1]:
                node = self._child(node, tok)
            last = tokens[-1]
            if last == b">":
                node.fwc[sub] = None
            else:
                self._child(node, last).subs[sub] = None
                if last != b"*":
                    self._last_tokens[last] = self._last_tokens.get(last, 0) + 1
            self._wildcards += 1
            self._drop_prefixes()
        else:
            bucket = self._literal.get(subject)
            if bucket is None:
                bucket = self._literal[subject] = {}
            bucket[sub] = None
        self.count += 1
        self.inserts += 1
        if sub.client.is_route or sub.client.is_relay:
            self.remote_count += 1
        if sub.guard is not None:
            self.guarded += 1
        if self.cache:
            self._invalidate(subject, wildcard)
        if self.watcher is not None:
            self.watcher(sub, True)

    def remove(self, sub: Subscription) -> bool:
        wildcard = self._unlink(sub)
        if wildcard is None:
            return False
        if self.cache:
            self._invalidate(sub.subject, wildcard)
        if self.watcher is not None:
            self.watcher(sub, False)
        return True

    def reweigh(self, sub: Subscription, weight: int) -> None:
        """A remote queue subscription now stands for `weight` members."""
        sub.weight = weight
        wildcard = has_wildcard(sub.subject)
        if wildcard:
            self._drop_prefixes()
        if self.cache:
            self._invalidate(sub.subject, wildcard)

    def remove_batch(self, subs: list[Subscription]) -> None:
        """Remove many subscriptions (a closing connection's) at once. Past a handful, the
        whole cache is dropped once, as the reference does, instead of entry by entry."""
        if len(subs) <= BATCH_INVALIDATE:
            for sub in subs:
                self.remove(sub)
            return
        watcher = self.watcher
        for sub in subs:
            if self._unlink(sub) is not None and watcher is not None:
                watcher(sub, False)
        self.cache.clear()
        self._cached = _CacheIndex()

    def _unlink(self, sub: Subscription) -> bool | None:
        """Take `sub` out of the index (the cache is the caller's business). Returns
        whether its subject has a wildcard, or None when it was not in the index."""
        subject = sub.subject
        if has_wildcard(subject):
            tokens = subject.split(b".")
            path: list[tuple[_Node, bytes]] = []
            node: _Node | None = self._root
            for tok in tokens[:-1]:
                assert node is not None
                path.append((node, tok))
                node = node.pwc if tok == b"*" else node.children.get(tok)
                if node is None:
                    return None
            last = tokens[-1]
            if last == b">":
                bucket = node.fwc
            else:
                path.append((node, last))
                node = node.pwc if last == b"*" else node.children.get(last)
                if node is None:
                    return None
                bucket = node.subs
            if bucket.pop(sub, 0) is not None:
                return None
            self._prune(path, node)
            self._wildcards -= 1
            self._drop_prefixes()
            if last != b">" and last != b"*":
                left = self._last_tokens.pop(last) - 1
                if left:
                    self._last_tokens[last] = left
            self._uncount(sub)
            return True
        bucket = self._literal.get(subject)
        if bucket is None or bucket.pop(sub, 0) is not None:
            return None
        if not bucket:
            del self._literal[subject]
        self._uncount(sub)
        return False

    def _uncount(self, sub: Subscription) -> None:
        self.count -= 1
        self.removes += 1
        if sub.client.is_route or sub.client.is_relay:
            self.remote_count -= 1
        if sub.guard is not None:
            self.guarded -= 1

    def match(self, subject: bytes) -> Result:
        self.asked += 1
        result = self.cache.get(subject)
        if result is not None:
            return result
        return self.compute(subject)

    def compute(self, subject: bytes) -> Result:
        """The result for `subject` from the index (not in `cache`), cached the second time
        it is asked for."""
        self.computed += 1
        indexed = True
        result = self._by_prefix(subject) if subject and subject[0] in self._heads else None
        if result is None:
            plain: list[Subscription] = []
            groups: dict[bytes, list[Subscription]] = {}
            literal = self._literal.get(subject)
            last_star = False
            if not subject or subject[0] == 46 or subject[-1] == 46 or b".." in subject:
                # A subject with an empty token matches nothing, as in the reference.
                indexed = False
            elif self._wildcards:
                last_star = _match_trie(self._root, subject.split(b"."), literal, plain, groups)
            elif literal:
                _collect(literal, plain, groups)
            if self.guarded and (plain or groups):
                plain, groups = _admitted(subject, plain, groups)
            if self.remote_count:
                result = split_remote(plain, groups)
            elif plain or groups:
                result = (tuple(plain), tuple(tuple(g) for g in groups.values()), None)
            else:
                result = EMPTY_RESULT
            if last_star and literal is None and not self.guarded:
                self._keep_prefix(subject, result)
        seen = self._seen
        if subject not in seen:  # cached the second time it is asked for: a subject used
            seen[subject] = None  # once (an ack's, a request's inbox) does not crowd out
            if len(seen) > MAX_CACHE:  # the ones used again and again
                seen.clear()
            return result
        cache = self.cache
        if len(cache) >= MAX_CACHE:
            cache.clear()
            self._cached = _CacheIndex()
        cache[subject] = result
        if indexed:
            self._cached.add(subject)
        return result

    def _by_prefix(self, subject: bytes) -> Result | None:
        """The result for `subject` kept by its prefix (None: compute it): the trie's,
        where neither its last token nor a literal subscription to it changes that."""
        prefix, _, last = subject.rpartition(b".")
        result = self._prefixes.get(prefix)  # (never b"": kept prefixes are valid subjects)
        if result is None or not last or last in self._last_tokens or subject in self._literal:
            return None
        return result

    def _keep_prefix(self, subject: bytes, result: Result) -> None:
        """Keep the trie's `result` for `subject` (a valid one, subscribed to by wildcards
        alone, none with a guard, its last token taken by a `*`: an inbox's `<inbox>.*`,
        whose replies share the prefix; not, say, `$JS.ACK.>`, whose acks differ in every
        token) by its prefix, if its last token is no wildcard subscription's."""
        prefix, _, last = subject.rpartition(b".")
        if not prefix or last in self._last_tokens:
            return
        if len(self._prefixes) >= MAX_CACHE:
            self._drop_prefixes()
        self._prefixes[prefix] = result
        self._heads.add(subject[0])

    def _drop_prefixes(self) -> None:
        self._prefixes.clear()
        self._heads.clear()

    def stats(self, routed: int) -> dict[str, Any]:
        """/subsz's numbers, as the reference's SublistStats: `routed`, the messages routed
        (each one lookup of the cache, which the parser's skips of subjects nobody wants
        answer too), and the lookups through match; the fan-outs of the cached results."""
        matches = routed + self.asked
        fanouts = [_fanout(result) for result in self.cache.values()]
        return {
            "num_subscriptions": self.count, "num_cache": len(self.cache),
            "num_inserts": self.inserts, "num_removes": self.removes, "num_matches": matches,
            "cache_hit_rate": max(matches - self.computed, 0) / matches if matches else 0.0,
            "max_fanout": max(fanouts, default=0),
            "avg_fanout": sum(fanouts) / len(fanouts) if sum(fanouts) else 0.0,
        }

    # -- internals -----------------------------------------------------------
    def _invalidate(self, pattern: bytes, wildcard: bool) -> None:
        """Drop the cached results an insert or remove of `pattern` changes."""
        cache = self.cache
        if not wildcard:
            if cache.pop(pattern, None) is not None:
                self._cached.discard(pattern)
            return
        for subject in self._cached.matching(pattern):
            del cache[subject]
            self._cached.discard(subject)

    @staticmethod
    def _child(node: _Node, tok: bytes) -> _Node:
        if tok == b"*":
            if node.pwc is None:
                node.pwc = _Node()
            return node.pwc
        child = node.children.get(tok)
        if child is None:
            child = node.children[tok] = _Node()
        return child

    @staticmethod
    def _prune(path: list[tuple[_Node, bytes]], node: _Node) -> None:
        for parent, tok in reversed(path):
            if not node.empty():
                return
            if tok == b"*":
                parent.pwc = None
            else:
                parent.children.pop(tok, None)
            node = parent


def _fanout(result: Result) -> int:
    """Receivers of a result, as the reference counts them: plain subscriptions and queue
    groups (a route's interest one each)."""
    plain, groups, remote = result
    n = len(plain) + len(groups)
    return n if remote is None else n + len(remote.plain) + len(remote.groups)


def _admitted(
    subject: bytes, plain: list[Subscription], groups: dict[bytes, list[Subscription]]
) -> tuple[list[Subscription], dict[bytes, list[Subscription]]]:
    """The subscriptions whose guard lets `subject` through."""
    plain = [s for s in plain if s.guard is None or s.guard(subject, None)]
    kept: dict[bytes, list[Subscription]] = {}
    for queue, members in groups.items():
        members = [s for s in members if s.guard is None or s.guard(subject, queue)]
        if members:
            kept[queue] = members
    return plain, kept


def _collect(subs: Bucket, plain: list[Subscription], groups: dict[bytes, list[Subscription]]) -> None:
    for sub in subs:
        if sub.queue is None:
            plain.append(sub)
        else:
            groups.setdefault(sub.queue, []).append(sub)


def _match_trie(
    root: _Node,
    tokens: list[bytes],
    literal: Bucket | None,
    plain: list[Subscription],
    groups: dict[bytes, list[Subscription]],
) -> bool:
    """Collect the subscriptions matching `tokens`, in the reference's order: at each level
    `>` subscriptions, then what matches under `*`, then on down the literal token; at the
    end the literal subscriptions (`literal`, kept outside the trie) and then the last
    level's `*` ones. Whether any of those last (a `*` took the last token).

    Iterative: a frame (node, i, literal, resumed) is a walk down from `node` at token i; a
    walk that meets a `*` branch pushes its own continuation (resumed) under the branch's
    walk, so the branch is collected first, as a recursive walk would.
    """
    n = len(tokens)
    last_star = False
    stack: list[tuple[_Node, int, Bucket | None, bool]] = [(root, 0, literal, False)]
    while stack:
        node, i, literal, resumed = stack.pop()
        while True:
            if not resumed:
                if node.fwc:
                    _collect(node.fwc, plain, groups)
                pwc = node.pwc
                if pwc is not None and i + 1 < n:
                    stack.append((node, i, literal, True))
                    stack.append((pwc, i + 1, None, False))
                    break
            resumed = False
            child = node.children.get(tokens[i])
            i += 1
            if i == n:
                if child is not None and child.subs:
                    _collect(child.subs, plain, groups)
                if literal:
                    _collect(literal, plain, groups)
                pwc = node.pwc
                if pwc is not None and pwc.subs:
                    _collect(pwc.subs, plain, groups)
                    last_star = True
                break
            if child is None:
                if literal:
                    _collect(literal, plain, groups)
                break
            node = child
    return last_star
