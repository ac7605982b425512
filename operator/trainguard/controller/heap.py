"""Hands the C heap's free pages back to the kernel, on every replica, once a minute.

A burst of reconciles (2,000 monitors applied at once, their 16,000 pods through the webhook) grows
glibc's main heap to about 180 MB, of which 30 MB stays in use once it is over: the JSON of LIST and
watch responses and the objects parsed from them are freed in an order that leaves no free block at
the heap's top, so glibc keeps the rest resident for good. `malloc_trim(0)` releases the free pages
anywhere in the heap (madvise), which took a steady operator from 491 to 353 MiB
(docs/performance.md). Python's own small-object arenas are mmapped and freed by Python itself; this
is for what goes through malloc. Where the C library has no `malloc_trim` (musl, macOS) nothing runs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("trainguard.heap")

TRIM_EVERY_S = 60.0
"""How often a replica trims its heap: a steady operator frees little between trims, and one trim of a
180 MB heap takes a few milliseconds (glibc holds the main arena's lock meanwhile)."""

Trim = Callable[[], object]


def glibc_trim() -> Trim | None:
    """`malloc_trim(0)` of the process's C library, or None where it has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


def resident_bytes() -> int:
    """This process's resident set from /proc/self/statm (0 where there is no /proc)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@dataclass
class HeapTrim:
    """One trim, timed, with what it gave back logged at debug: the loop's work (periodic.Loop)."""

    trim: Trim
    resident: Callable[[], int] = resident_bytes
    clock: Callable[[], float] = time.monotonic

    def run(self) -> int:
        """Trims once; returns the bytes the resident set shrank by (negative if it grew meanwhile)."""
        before, t0 = self.resident(), self.clock()
        self.trim()
        took, after = self.clock() - t0, self.resident()
        log.debug(
            "heap trim: %.1f MiB back to the kernel in %.1f ms (resident %.1f MiB)",
            (before - after) / 2**20,
            1000 * took,
            after / 2**20,
        )
        return before - after
