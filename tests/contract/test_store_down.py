"""Every store says "unavailable" the same way: StoreUnavailable, raised at its boundary.

The worker, the master and the server judge store failures only by that class
(backends/guard.py), so a store that let its driver's own error through would crash
them instead of backing off. Each store is opened on an address nobody listens on (or a
file that cannot be created) and every kind of call must raise StoreUnavailable.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import deferq
from deferq.backends.base import Outcome, OutcomeKind
from deferq.errors import StoreUnavailable
from deferq.job import Job


def closed_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dead_url(store: str, tmp_path: Path) -> str:
    if store == "sqlite":
        blocker = tmp_path / "not-a-directory"
        blocker.write_text("a file where the store's folder should be")
        return f"sqlite:///{blocker}/deferq.db"
    port = closed_port()
    return {
        "redis": f"redis://127.0.0.1:{port}/0",
        "redis_cluster": f"redis+cluster://127.0.0.1:{port}",
        "redis_shards": f"redis+shards://127.0.0.1:{port},127.0.0.1:{closed_port()}",
        "postgres": f"postgresql://postgres@127.0.0.1:{port}/test?connect_timeout=2",
        "mysql": f"mysql://root@127.0.0.1:{port}/test",
    }[store]


CALLS = {
    "enqueue": lambda app: app.enqueue("t"),
    "reserve": lambda app: app.backend.reserve(["default"], 1, "w", 5.0, [0, 1, 2]),
    "settle": lambda app: app.backend.settle([Outcome(Job("x", "t"), OutcomeKind.SUCCEEDED)]),
    "kv_put": lambda app: app.backend.kv_put("ns", "k", b"v"),
    "kv_get": lambda app: app.backend.kv_get("ns", "k"),
    "kv_swap": lambda app: app.backend.kv_swap("ns", "k", b"v", b"w"),
    "get": lambda app: app.get("x"),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("store", ["sqlite", "redis", "redis_cluster", "redis_shards", "postgres", "mysql"])
def test_a_store_that_cannot_be_reached_raises_store_unavailable(store, call, tmp_path):
    app = deferq.App(dead_url(store, tmp_path))
    try:
        with pytest.raises(StoreUnavailable):
            CALLS[call](app)
    finally:
        app.close()
