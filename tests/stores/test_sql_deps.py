"""A parent that settles while an enqueue links a new job to it (PostgreSQL): the
settle waits for the enqueue's lock on the parent's row, then its statement's
snapshot is older than the new edge; the parent's row says it is waited for, so the
edge is released at once, not at the keeper's next sweep."""

from __future__ import annotations

import threading
import time

import psycopg

import deferq
from deferq.backends.base import Outcome
from deferq.job import JobState


def test_a_settle_that_waited_for_an_enqueue_releases_its_new_edges(postgres_url, postgres_admin):
    admin, _ = postgres_admin
    app = deferq.App(postgres_url)
    backend = app.backend
    try:
        parent = app.enqueue("t", [1])
        [leased] = backend.reserve(["default"], 1, "w", 60, (0, 1, 2))
        with psycopg.connect(postgres_url.split("?")[0], autocommit=True) as conn:
            conn.execute(f"SET search_path TO {postgres_url.split('schema=')[1]}")
            with conn.transaction():
                child = app.enqueue("t", [2], after=[parent], connection=conn)  # holds the parent's row
                settle = threading.Thread(target=backend.settle, args=([Outcome(leased, "succeeded")],))
                settle.start()
                deadline = time.monotonic() + 10
                while not admin.execute(  # the settle waits for this transaction's lock
                    "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
                    ["%deferq_jobs%"],
                ).fetchone():
                    assert time.monotonic() < deadline, "the settle never waited for the enqueue"
                    time.sleep(0.01)
            settle.join(timeout=10)
        assert app.get(parent.id).state == JobState.SUCCEEDED
        assert app.get(child.id).state == JobState.QUEUED  # released now, not by a sweep
    finally:
        app.close()
