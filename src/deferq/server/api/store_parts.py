"""GET /v1/store/parts: each part of the store that can fail alone (every Redis shard of a
redis+shards:// URL; else the store itself), up or down, how fast it answers, and what it
says of itself (version, memory or size). A part that is down is reported, not raised:
the console shows which shard is down while the others keep working."""

from __future__ import annotations

import statistics
import time
from typing import Any

from ...backends.base import Backend, JobStore
from ...errors import StoreUnavailable, first_line

PINGS = 3


def part_health(name: str, part: JobStore) -> dict[str, Any]:
    report: dict[str, Any] = {"name": name, "up": False, "latency_ms": None, "version": None,
                              "memory_bytes": None, "size_bytes": None, "error": None}
    try:
        pings = []
        for _ in range(PINGS):
            started = time.perf_counter()
            part.ping()
            pings.append((time.perf_counter() - started) * 1000)
        said = part.describe() if isinstance(part, Backend) else {}
    except StoreUnavailable as exc:
        report["error"] = first_line(str(exc)) or type(exc).__name__
        return report
    report.update({key: said.get(key) for key in ("version", "memory_bytes", "size_bytes")})
    report.update(up=True, latency_ms=round(statistics.median(pings), 2))
    return report


def store_parts(backend: Backend) -> dict[str, Any]:
    return {"parts": [part_health(name, part) for name, part in backend.parts()]}
