"""Unsigned varints (protobuf's and Go's encoding/binary's): seven bits a byte, low first."""

from __future__ import annotations


def put_uvarint(value: int) -> bytes:
    """`value` (>= 0) as a varint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
