"""What differential tests compare where two servers' values cannot be equal (ids, times,
sizes): the JSON kind of a value."""

from __future__ import annotations

from typing import Any


def json_kind(value: Any) -> str:
    """`value`'s JSON kind, as a placeholder: <bool>, <number>, <object>, <array>,
    <string>, <null>."""
    if isinstance(value, bool):
        return "<bool>"
    if isinstance(value, int | float):
        return "<number>"
    if isinstance(value, dict):
        return "<object>"
    if isinstance(value, list):
        return "<array>"
    return "<string>" if isinstance(value, str) else "<null>"
