"""An OSError at start-up as one sentence: what failed, where, and why.

`[Errno 20] Not a directory: '/etc/passwd/x'` becomes `streaming store directory
/etc/passwd/x: not a directory`, and a listener that cannot bind names itself and its
address (`can't listen to the monitor port: 127.0.0.1:8222, Address already in use`).
The sentences are OSErrors still, so that whoever catches OSError keeps doing so.
"""

from __future__ import annotations

import os


class StartError(OSError):
    """An OSError whose str() is the whole sentence (no errno prefix)."""


def reason(exc: OSError) -> str:
    """The cause, as the C library words it ("Address already in use"), without the
    `[Errno N]` prefix and the file name Python adds."""
    if (exc.errno or 0) > 0:
        return os.strerror(exc.errno)  # type: ignore[arg-type]
    return exc.strerror or str(exc)


def cause(exc: OSError) -> str:
    """The reason in a sentence's middle: "not a directory"."""
    text = reason(exc)
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def about(what: str, path: str, exc: OSError) -> StartError:
    """`what path: cause`, with the file that failed when it is another (one inside)."""
    failed = os.fsdecode(exc.filename) if exc.filename is not None else ""
    inside = f" ({failed})" if failed and failed != str(path) else ""
    return StartError(f"{what} {path}: {cause(exc)}{inside}")


def listen_error(what: str, host: str, port: int, exc: OSError) -> StartError:
    """`what: host:port, reason`, as the reference words a listener that cannot start."""
    return StartError(f"{what}: {host}:{port}, {reason(exc)}")


def describe(exc: BaseException) -> str:
    """Any error as one line: an OSError from the system as `file: cause`."""
    if isinstance(exc, OSError) and not isinstance(exc, StartError) and (exc.errno or 0) > 0:
        if exc.filename is not None:
            return f"{os.fsdecode(exc.filename)}: {cause(exc)}"
        return reason(exc)
    return str(exc)
