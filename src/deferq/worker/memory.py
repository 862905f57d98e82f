"""Giving the memory a busy spell freed back to the system once the worker goes idle,
and keeping glibc from giving every thread its own heap.

CPython frees objects into the C allocator, which keeps the pages for reuse: a worker's
resident size stays at its busiest moment's. glibc's `malloc_trim` returns the free
pages (a Redis worker: ~1.1 MiB after start-up's imports, ~1.3 after a burst of 20,000
short jobs). Elsewhere (musl, macOS) there is no such call and nothing is done.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable

TRIM_EVERY = 2.0  # seconds: the least time between two trims (each ~0.1-1 ms of CPU)
M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)
ARENAS = 2  # malloc arenas a worker process uses at most


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


class Trimmer:
    """Trims when told the worker is idle, once per busy spell (`processed` moved since
    the last trim) and at most every TRIM_EVERY seconds; the first call always trims
    (what start-up's imports freed)."""

    def __init__(self) -> None:
        self.processed: int | None = None
        self.at = 0.0

    def idle(self, processed: int, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        if processed == self.processed or now - self.at < TRIM_EVERY or _TRIM is None:
            return False
        _TRIM(0)
        self.processed, self.at = processed, now
        return True


def limit_arenas() -> bool:
    """Cap glibc's malloc arenas at ARENAS, unless MALLOC_ARENA_MAX says otherwise.

    glibc gives each thread that allocates while the others hold their arenas a new one,
    up to 8 per core; a worker runs 13 threads (21 on PostgreSQL, whose pools run their
    own), and each arena keeps pages of its own. Python allocates under its interpreter
    lock, so the threads seldom contend for an arena: two cost no speed and save
    ~0.6-0.7 MiB per process on Redis and on PostgreSQL (docs/benchmarks.md). Called
    before any thread starts: glibc fixes the limit when it first needs one. True when set."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_ARENA_MAX, ARENAS))
