"""`tidings server --signal CMD[=PID]`: send a running server the signal nats-server's
`--signal` sends (stop, quit, term, reopen, reload, ldm). PID is a process id or the path of
a PID file; without it the server's `-P` PID file is used."""

from __future__ import annotations

import os
import signal

# As the reference's CommandToSignal.
COMMANDS = {
    "stop": signal.SIGKILL,
    "quit": signal.SIGINT,
    "term": signal.SIGTERM,
    "reopen": signal.SIGUSR1,
    "reload": signal.SIGHUP,
    "ldm": signal.SIGUSR2,
}


def send_signal(spec: str, pid_file: str | None) -> int:
    """Send the signal of `spec` ("reload", "stop=1234", "ldm=/run/nats.pid"); raises
    ValueError (a one-line error for the user) when it cannot."""
    command, _, target = spec.partition("=")
    signum = COMMANDS.get(command.strip().lower())
    if signum is None:
        raise ValueError(f"unknown signal {command!r}")
    target = target.strip() or (pid_file or "")
    if not target:
        raise ValueError("no pid: give one (--signal CMD=PID or a PID file) or -P FILE")
    pid = _pid_of(target)
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        raise ValueError(f"signal {command!r} {pid}: no such process") from None
    except PermissionError:
        raise ValueError(f"signal {command!r} {pid}: operation not permitted") from None
    return 0


def _pid_of(target: str) -> int:
    if target.isdigit():
        return int(target)
    try:
        with open(target, encoding="ascii") as f:
            text = f.read().strip()
    except OSError as exc:
        raise ValueError(f"cannot read PID file {target}: {exc.strerror}") from None
    if not text.isdigit():
        raise ValueError(f"invalid pid: {text!r} in {target}")
    return int(text)
