"""Names of a package imported from its modules when first used, so that importing the
package stays cheap (start-up: `tidings server` must not load what it does not run)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_names(package: str, where: dict[str, str],
               into: dict[str, Any]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: `where` maps each name to the module (relative,
    ".runner") that defines it; a name once imported is kept in `into` (its globals)."""

    def getattr_(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module, package), name)
        into[name] = value
        return value

    return getattr_
