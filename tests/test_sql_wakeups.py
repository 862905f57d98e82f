"""Idle workers on SQL stores wake when a job becomes due: PostgreSQL by NOTIFY (sent at
commit, never for a rolled-back enqueue, and also for a job due within the second),
MySQL by polling no slower than POLL_MAX."""

from __future__ import annotations

import threading
import time

import pytest

import deferq
from deferq.backends.sql.mysql import POLL_MAX

from .stores.postgres import BASE_URL as POSTGRES_BASE


def waited(backend, timeout: float, during) -> float:
    """Seconds `wait_for_work` blocked while `during()` ran in another thread after 0.1 s."""
    timer = threading.Timer(0.1, during)
    start = time.monotonic()
    timer.start()
    try:
        backend.wait_for_work(["default"], timeout)
    finally:
        timer.join()
    return time.monotonic() - start


@pytest.fixture
def pg_app(postgres_url):
    app = deferq.App(postgres_url, lease=5)
    yield app
    app.close()


def test_postgres_job_due_soon_wakes_the_waiter_at_its_due_time(pg_app):
    backend = pg_app.backend
    assert waited(backend, 3.0, lambda: pg_app.enqueue("noop", [1], delay=0.3)) < 0.35
    assert backend.reserve(["default"], 1, "w", 5, (0, 1, 2)) == []  # not due yet
    start = time.monotonic()
    backend.wait_for_work(["default"], 3.0)  # sleeps until the due time, not the timeout
    assert time.monotonic() - start < 0.6
    assert len(backend.reserve(["default"], 1, "w", 5, (0, 1, 2))) == 1


def test_postgres_rolled_back_enqueue_wakes_nobody(pg_app):
    import psycopg

    def enqueue_and_roll_back():
        with psycopg.connect(POSTGRES_BASE) as conn:
            pg_app.enqueue("noop", [1], connection=conn)
            conn.rollback()

    assert waited(pg_app.backend, 0.6, enqueue_and_roll_back) >= 0.55


def test_mysql_polling_notices_a_job_quickly(mysql_url):
    app = deferq.App(mysql_url, lease=5)
    try:
        app.backend.wait_for_work(["default"], 0.3)  # idle long enough to poll at POLL_MAX
        # within a poll, long before the 3 s wait ends (the slack: a busy machine's scheduling)
        assert waited(app.backend, 3.0, lambda: app.enqueue("noop", [1])) < POLL_MAX + 0.5
    finally:
        app.close()
