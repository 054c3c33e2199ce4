"""glibc malloc settings for a server process: keep freed memory for the next large message,
and give what stays free back to the kernel now and then.

By default glibc hands a freed block of more than 128 KiB back to the kernel (munmap, or a trim
of the heap's top), so the next large buffer (a message of a few hundred KiB, a bulk fetch
reply, a socket read) is built on fresh pages, each one a page fault: a 900 KiB message cost the
server ~430 faults, and a streaming server answering 384 KiB fetches a third of its CPU. Buffers
up to MMAP_THRESHOLD now come from the heap, and up to TRIM_THRESHOLD of free memory at its top
stays mapped for reuse. What a burst left free (a slow consumer's pending data, say) would then
stay in the process, so every TRIM_EVERY seconds `malloc_trim` returns the free pages, the way
Go's scavenger returns a reference server's. Elsewhere than glibc nothing changes.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 4 * 1024 * 1024
TRIM_THRESHOLD = 16 * 1024 * 1024
TRIM_EVERY = 30.0

T = TypeVar("T")


def keep_freed_memory() -> Callable[[], None] | None:
    """Apply the settings to this process; the function that gives free memory back (None
    where the C library is not glibc)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt, malloc_trim = libc.mallopt, libc.malloc_trim  # glibc only (musl has none)
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim.restype = ctypes.c_int
    if not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD,
                                                                  TRIM_THRESHOLD)):
        return None

    def give_back() -> None:
        malloc_trim(0)

    return give_back


async def give_back_periodically(give_back: Callable[[], None] | None,
                                 every: float = TRIM_EVERY) -> None:
    """Run `give_back` every `every` seconds, in a thread (a trim of 100 MiB takes ~8 ms, and
    ctypes releases the GIL for it), until cancelled."""
    if give_back is None:
        return
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(every)
        await loop.run_in_executor(None, give_back)


async def giving_back(give_back: Callable[[], None] | None, main: Awaitable[T]) -> T:
    """Await `main` while `give_back` runs every TRIM_EVERY seconds."""
    trimmer = asyncio.ensure_future(give_back_periodically(give_back))
    try:
        return await main
    finally:
        trimmer.cancel()
