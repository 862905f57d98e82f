"""The server's settings: from `deferq serve` options, passed to each server process."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from .overload import Overload

ENV = "DEFERQ_SERVER_CONFIG"  # how `deferq serve --workers N` hands settings to each process
STORE_THREADS = min(32, (os.cpu_count() or 1) + 4)  # as many as asyncio's own default pool


@dataclass
class ServerConfig:
    url: str | None = None  # the store; None: DEFERQ_URL, else sqlite:///deferq.db
    app_path: str | None = None  # module:attr of an App, for task defaults (optional)
    auth: bool = True  # False: every route is open (local development only)
    allowed_hosts: list[str] = field(default_factory=list)  # Host names served without auth, besides loopback
    max_body: int = 1024 * 1024  # bytes of a request body; more is a 413
    max_batch: int = 1000  # jobs in one POST /v1/jobs/batch
    max_queue_length: int | None = None  # unfinished jobs a queue may hold; more is a 429
    queue_limits: dict[str, int] = field(default_factory=dict)  # per-queue overrides
    max_inflight: int | None = None  # API requests one process answers at once; more: see overload
    overload: Overload = "refuse"  # past max_inflight: refuse at once, or shed-oldest (overload.py)
    max_waiting: int = 0  # shed-oldest: requests one process keeps waiting for a slot
    max_wait: float | None = None  # shed-oldest: seconds a request may wait before it is answered busy
    retry_after: int = 1  # seconds, the Retry-After of a 429 or 503
    request_log: str | None = "off"  # file, "-" (stderr) or "off"
    error_log: str | None = "-"
    enqueue_flights: int = 2  # enqueue batches in flight at once per process
    store_threads: int = STORE_THREADS  # short store calls at once per process
    wait_threads: int = 16  # ?wait= requests blocked in the store at once; more poll instead
    waits_per_token: int = 8  # ?wait= requests one token holds open at once; more: 429
    # take part in the store's upkeep, sweeps and firing schedules (`deferq serve` does by default)
    schedules: bool = False

    def limit_for(self, queue: str) -> int | None:
        return self.queue_limits.get(queue, self.max_queue_length)

    def to_env(self) -> str:
        return orjson.dumps(asdict(self)).decode()

    @classmethod
    def from_env(cls) -> ServerConfig:
        raw = os.environ.get(ENV)
        data: dict[str, Any] = orjson.loads(raw) if raw else {}
        return cls(**data)
