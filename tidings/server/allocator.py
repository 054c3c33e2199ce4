"""glibc malloc settings for a server process: keep freed memory for the next large message.

By default glibc hands a freed block of more than 128 KiB back to the kernel (munmap, or a trim
of the heap's top), so the next large buffer (a message of a few hundred KiB, a bulk fetch
reply, a socket read) is built on fresh pages, each one a page fault: a 1 MiB message cost the
server ~660 faults and 2 ms, and a streaming server answering 384 KiB fetches spent a third of
its CPU there. Buffers up to MMAP_THRESHOLD now come from the heap, and up to TRIM_THRESHOLD of
free memory at its top stays mapped for reuse. Elsewhere than glibc nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 4 * 1024 * 1024
TRIM_THRESHOLD = 16 * 1024 * 1024


def keep_freed_memory() -> bool:
    """Apply the settings to this process; whether the C library took them."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt  # glibc only (musl has none)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
