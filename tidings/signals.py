"""Signals the reference servers trap where there is nothing to do (a reload without a
configuration file, a log re-open): logged, and the server keeps running. (Reload with a
file and SIGUSR2, lame duck mode, are the server's own: Server.reload_with, enter_lame_duck.)"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

log = logging.getLogger("tidings")

# nats-server: SIGHUP reloads the configuration, SIGUSR1 re-opens the log file.
SERVER_SIGNALS = {
    signal.SIGHUP: (logging.ERROR, "Failed to reload server configuration: can only reload "
                                   "config when a file is provided using -c or --config"),
    signal.SIGUSR1: (logging.INFO, "File log re-open ignored, not a file logger"),
}
# nats-streaming-server on its own (no embedded NATS server) traps only SIGHUP and SIGUSR1.
STANDALONE_STREAMING_SIGNALS = {
    signal.SIGHUP: (logging.WARNING,
                    "Reload supported only for embedded NATS Server's configuration"),
    signal.SIGUSR1: SERVER_SIGNALS[signal.SIGUSR1],
}


def trap_unsupported_signals(loop: asyncio.AbstractEventLoop,
                             notes: dict[signal.Signals, tuple[int, str]]) -> None:
    """Log each of these signals (as the reference: 'Trapped "hangup" signal') and its note,
    instead of dying of it."""
    for sig, (level, note) in notes.items():

        def trapped(sig: signal.Signals = sig, level: int = level, note: str = note) -> None:
            log.info('Trapped "%s" signal', signal.strsignal(sig).lower())
            log.log(level, note)

        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, trapped)
