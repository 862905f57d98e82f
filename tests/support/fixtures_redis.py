"""Tasks for the Redis fault tests' worker subprocesses (`--app tests.support.fixtures_redis:app`).

The store comes from DEFERQ_URL; the lease from DEFERQ_TEST_LEASE. Control keys
(which a test sets to steer tasks) live in the Redis that DEFERQ_TEST_CONTROL names.
"""

from __future__ import annotations

import os
import time

import redis

import deferq

app = deferq.App(lease=float(os.environ.get("DEFERQ_TEST_LEASE", "2")))
_control = None


def control() -> redis.Redis:
    global _control
    if _control is None:
        _control = redis.Redis.from_url(os.environ["DEFERQ_TEST_CONTROL"])
    return _control


@app.task(max_attempts=5)
def noop(n: int) -> int:
    return n


@app.task(max_attempts=5, timeout=120)
def hold(flag: str) -> str:
    """Runs while the control key `flag` exists (a job a test can kill its worker in)."""
    client = control()
    client.incr(flag + ":started")
    deadline = time.monotonic() + 60
    while client.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.05)
    return "released"
