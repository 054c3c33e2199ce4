"""The subject index: which subscriptions match a published subject.

Literal subscriptions live in a dict keyed by subject; wildcard subscriptions in a token trie.
`match` answers from a result cache, so a publish to a known subject costs one dict lookup.
Insert and remove keep the cache valid by dropping only the entries they affect.
"""

from __future__ import annotations

from typing import Any

from ..protocol.subjects import has_wildcard, subject_matches

# A match result: (plain subscriptions, queue groups), each group a tuple of subscriptions.
Result = tuple[tuple["Subscription", ...], tuple[tuple["Subscription", ...], ...]]
EMPTY_RESULT: Result = ((), ())
MAX_CACHE = 65536


class Subscription:
    """One SUB of one client. `sid_sp` (" <sid> ") is pre-encoded for MSG frames."""

    __slots__ = ("client", "subject", "queue", "sid", "sid_sp", "max", "delivered", "closed")

    def __init__(self, client: Any, subject: bytes, queue: bytes | None, sid: bytes) -> None:
        self.client = client
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.sid_sp = b" " + sid + b" "
        self.max = 0
        self.delivered = 0
        self.closed = False


class _Node:
    __slots__ = ("children", "pwc", "fwc", "subs")

    def __init__(self) -> None:
        self.children: dict[bytes, _Node] = {}
        self.pwc: _Node | None = None
        self.fwc: list[Subscription] = []
        self.subs: list[Subscription] = []

    def empty(self) -> bool:
        return not (self.children or self.pwc or self.fwc or self.subs)


class Sublist:
    """Subscriptions indexed by subject, with a cache of match results."""

    def __init__(self) -> None:
        self._literal: dict[bytes, list[Subscription]] = {}
        self._root = _Node()
        self._wildcards = 0
        self.cache: dict[bytes, Result] = {}
        self.count = 0

    def insert(self, sub: Subscription) -> None:
        subject = sub.subject
        if has_wildcard(subject):
            node = self._root
            tokens = subject.split(b".")
            for tok in tokens[:-1]:
                node = self._child(node, tok)
            last = tokens[-1]
            if last == b">":
                node.fwc.append(sub)
            else:
                self._child(node, last).subs.append(sub)
            self._wildcards += 1
            self._invalidate_pattern(subject)
        else:
            self._literal.setdefault(subject, []).append(sub)
            self.cache.pop(subject, None)
        self.count += 1

    def remove(self, sub: Subscription) -> bool:
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
                    return False
            last = tokens[-1]
            if last == b">":
                bucket = node.fwc
            else:
                path.append((node, last))
                node = node.pwc if last == b"*" else node.children.get(last)
                if node is None:
                    return False
                bucket = node.subs
            if sub not in bucket:
                return False
            bucket.remove(sub)
            self._prune(path, node)
            self._wildcards -= 1
            self._invalidate_pattern(subject)
        else:
            subs = self._literal.get(subject)
            if not subs or sub not in subs:
                return False
            subs.remove(sub)
            if not subs:
                del self._literal[subject]
            self.cache.pop(subject, None)
        self.count -= 1
        return True

    def match(self, subject: bytes) -> Result:
        result = self.cache.get(subject)
        if result is not None:
            return result
        plain: list[Subscription] = []
        groups: dict[bytes, list[Subscription]] = {}
        literal = self._literal.get(subject)
        if not subject or subject[0] == 46 or subject[-1] == 46 or b".." in subject:
            # A subject with an empty token matches nothing, as in the reference.
            pass
        elif self._wildcards:
            _match_level(self._root, subject.split(b"."), 0, plain, groups, literal)
        elif literal:
            _collect(literal, plain, groups)
        if plain or groups:
            result = (tuple(plain), tuple(tuple(g) for g in groups.values()))
        else:
            result = EMPTY_RESULT
        cache = self.cache
        if len(cache) >= MAX_CACHE:
            # Drop an arbitrary quarter; entries are rebuilt on demand.
            for key in list(cache)[: MAX_CACHE // 4]:
                del cache[key]
        cache[subject] = result
        return result

    # -- internals -----------------------------------------------------------
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

    def _invalidate_pattern(self, pattern: bytes) -> None:
        stale = [s for s in self.cache if subject_matches(pattern, s)]
        for s in stale:
            del self.cache[s]


def _collect(
    subs: list[Subscription], plain: list[Subscription], groups: dict[bytes, list[Subscription]]
) -> None:
    for sub in subs:
        if sub.queue is None:
            plain.append(sub)
        else:
            groups.setdefault(sub.queue, []).append(sub)


def _match_level(
    node: _Node,
    tokens: list[bytes],
    i: int,
    plain: list[Subscription],
    groups: dict[bytes, list[Subscription]],
    literal: list[Subscription] | None = None,
) -> None:
    """Collect the subscriptions matching tokens[i:] below `node`, in the reference's order:
    at each level `>` subscriptions, then what matches under `*`, then on down the literal
    token; at the end the literal subscriptions (`literal`, kept outside the trie) and then
    the last level's `*` ones."""
    n = len(tokens)
    pwc: _Node | None = None
    child: _Node | None = None
    while i < n:
        if node.fwc:
            _collect(node.fwc, plain, groups)
        pwc = node.pwc
        if pwc is not None:
            _match_level(pwc, tokens, i + 1, plain, groups)
        child = node.children.get(tokens[i])
        i += 1
        if child is None:
            if i < n:
                if literal:
                    _collect(literal, plain, groups)
                return
            break
        node = child
    if child is not None and child.subs:
        _collect(child.subs, plain, groups)
    if literal:
        _collect(literal, plain, groups)
    if pwc is not None and pwc.subs:
        _collect(pwc.subs, plain, groups)
