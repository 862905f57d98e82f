"""Orders to a worker process or a master, through the store (kv "worker-orders", keyed
by the worker's name, or "master:" and the master's id), so they reach it on every store
and from any machine: "quiet" (take no new job, finish the running ones, stay up) or
"stop" (the same, then exit, as on SIGTERM). A worker reads its order at each heartbeat,
a master at each check (then orders each of its children quiet, and starts no new one)."""

from __future__ import annotations

import time
from typing import Any

import orjson

from ..backends import Backend

NAMESPACE = "worker-orders"
ORDERS = ("quiet", "stop")
KEEP = 3600.0  # seconds an order waits for its worker; one that never beats again is gone


def master_key(master_id: str) -> str:
    return f"master:{master_id}"


def give(backend: Backend, worker: str, order: str, by: str) -> dict[str, Any]:
    """Leave `order` for `worker` (a later order replaces an earlier one); who gave it."""
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}: use {' or '.join(ORDERS)}")
    record = {"worker": worker, "order": order, "by": by, "at": time.time()}
    backend.kv_put(NAMESPACE, worker, orjson.dumps(record), KEEP)
    return record


def read(backend: Backend, worker: str) -> dict[str, Any] | None:
    raw = backend.kv_get(NAMESPACE, worker)
    return None if raw is None else dict(orjson.loads(raw))


def clear(backend: Backend, worker: str) -> None:
    """A worker that stopped drops its order: a new one of the same name starts afresh."""
    backend.kv_delete(NAMESPACE, worker)
