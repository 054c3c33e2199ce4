"""The NATS/1.0 header block: parse and serialise, multi-value, case preserved, status line."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

HEADER_VERSION = b"NATS/1.0"
STATUS_HDR = "Status"
DESCRIPTION_HDR = "Description"


class HeaderError(ValueError):
    """A header block that does not follow the NATS/1.0 format."""


class Headers:
    """An ordered, multi-value header map that keeps the case of names as given.

    Lookups are exact first and fall back to a case-insensitive match, so `h["content-type"]`
    finds `Content-Type`. `status` and `description` come from the version line
    (`NATS/1.0 503 No Responders`).
    """

    __slots__ = ("_items", "status", "description")

    def __init__(
        self,
        items: Mapping[str, str | list[str]] | Iterable[tuple[str, str]] | None = None,
        status: int | None = None,
        description: str = "",
    ) -> None:
        self._items: list[tuple[str, str]] = []
        self.status = status
        self.description = description
        if items is None:
            return
        if isinstance(items, Headers):
            self._items = list(items._items)
            self.status = items.status if status is None else status
            self.description = description or items.description
            return
        pairs = items.items() if isinstance(items, Mapping) else items
        for name, value in pairs:
            if isinstance(value, (list, tuple)):
                for v in value:
                    self.add(name, v)
            else:
                self.add(name, value)

    # -- mapping-like access -------------------------------------------------
    def add(self, name: str, value: str) -> None:
        """Append a value for `name`, keeping any earlier ones."""
        _check_name(name)
        _check_value(value)
        self._items.append((name, value))

    def set(self, name: str, value: str) -> None:
        """Replace every value of `name` with `value`."""
        self.remove(name)
        self.add(name, value)

    def remove(self, name: str) -> None:
        self._items = [(n, v) for n, v in self._items if n != name]

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of `name` (exact case first, then any case)."""
        for n, v in self._items:
            if n == name:
                return v
        low = name.lower()
        for n, v in self._items:
            if n.lower() == low:
                return v
        return default

    def get_all(self, name: str) -> list[str]:
        exact = [v for n, v in self._items if n == name]
        if exact:
            return exact
        low = name.lower()
        return [v for n, v in self._items if n.lower() == low]

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)

    def keys(self) -> list[str]:
        seen: dict[str, None] = {}
        for n, _ in self._items:
            seen.setdefault(n, None)
        return list(seen)

    def to_dict(self) -> dict[str, str]:
        """Name → last value, the shape nats-py hands to applications."""
        return {n: v for n, v in self._items}

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __setitem__(self, name: str, value: str) -> None:
        self.set(name, value)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items) or self.status is not None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Headers):
            return NotImplemented
        return (self._items, self.status, self.description) == (
            other._items,
            other.status,
            other.description,
        )

    def __repr__(self) -> str:
        status = f", status={self.status}" if self.status is not None else ""
        return f"Headers({self._items!r}{status})"

    # -- wire format ---------------------------------------------------------
    def encode(self) -> bytes:
        """The header block, from `NATS/1.0` to the blank line that ends it."""
        first = HEADER_VERSION
        if self.status is not None:
            first += b" %d" % self.status
            if self.description:
                first += b" " + self.description.encode()
        parts = [first]
        for name, value in self._items:
            parts.append(name.encode() + b": " + value.encode())
        return b"\r\n".join(parts) + b"\r\n\r\n"

    @classmethod
    def decode(cls, block: bytes) -> Headers:
        """Parse a header block (with or without its terminating blank line)."""
        if not block.startswith(HEADER_VERSION):
            raise HeaderError("header block does not start with NATS/1.0")
        lines = block.split(b"\r\n")
        first = lines[0][len(HEADER_VERSION):].strip()
        status: int | None = None
        description = ""
        if first:
            code, _, desc = first.partition(b" ")
            if len(code) != 3 or not code.isdigit():
                raise HeaderError(f"bad status {code!r}")
            status = int(code)
            description = desc.strip().decode(errors="replace")
        headers = cls(status=status, description=description)
        items = headers._items
        for line in lines[1:]:
            if not line:
                continue
            if line[0] in b" \t" and items:
                # An obsolete folded continuation line belongs to the previous value.
                name, value = items[-1]
                items[-1] = (name, value + " " + line.strip().decode(errors="replace"))
                continue
            name, sep, value = line.partition(b":")
            if not sep or not name.strip():
                raise HeaderError(f"bad header line {line!r}")
            items.append((name.strip().decode(errors="replace"),
                          value.strip().decode(errors="replace")))
        return headers


def _check_name(name: str) -> None:
    if not name or any(c in name for c in ": \t\r\n"):
        raise HeaderError(f"invalid header name {name!r}")


def _check_value(value: str) -> None:
    if "\r" in value or "\n" in value:
        raise HeaderError(f"invalid header value {value!r}")


def header_fields(block: bytes) -> dict[str, str]:
    """A header block's fields by lower-case name, each with its first value, lines that
    are not `name: value` skipped: what a server reads to act on a message (its JetStream
    and tracing headers), where Headers.decode is the client's strict reading."""
    fields: dict[str, str] = {}
    for line in block.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            fields.setdefault(name.strip().lower().decode(errors="replace"),
                              value.strip().decode(errors="replace"))
    return fields


def replace_header(block: bytes, name: str, value: str) -> bytes:
    """A header block with every `name` line (any case) dropped and `name: value` added at
    its end: how a server rewrites one header of a message it stores."""
    wanted = name.lower().encode()
    lines = block.split(b"\r\n") if block else [HEADER_VERSION]
    kept = [line for line in lines[1:]
            if line and line.partition(b":")[0].strip().lower() != wanted]
    return b"\r\n".join([lines[0], *kept, f"{name}: {value}".encode()]) + b"\r\n\r\n"


def status_headers(status: int, description: str = "") -> bytes:
    """A status-only header block, e.g. the 503 the server sends when there are no responders."""
    return Headers(status=status, description=description).encode()


class EncodedHeaders(Headers):
    """A header block already encoded (built a column or a message at a time, much cheaper
    than a Headers per message): what a client sends is `encode()`'s."""

    __slots__ = ("block",)

    def __init__(self, block: bytes) -> None:
        super().__init__()
        self.block = block

    def encode(self) -> bytes:
        return self.block
