"""Idle workers on SQL stores wake when a job becomes due: PostgreSQL by NOTIFY (sent at
commit, never for a rolled-back enqueue, and also for a job due within the second; an
enqueue notifies only while a worker waits, and no wake-up is lost around the moment a
worker starts waiting), MySQL by polling no slower than POLL_MAX."""

from __future__ import annotations

import random
import threading
import time

import pytest

import deferq
from deferq.backends.sql.mysql import POLL_MAX
from deferq.options import JobOptions
from deferq.task import Call
from tests.support.stores.postgres import BASE_URL as POSTGRES_BASE


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


def notifications(conn, timeout: float) -> list[str]:
    return [note.payload for note in conn.notifies(timeout=timeout, stop_after=1)]


@pytest.fixture
def pg_listen(postgres_admin):
    """A connection listening where idle workers do."""
    import psycopg

    _, schema = postgres_admin
    with psycopg.connect(POSTGRES_BASE, autocommit=True) as conn:
        conn.execute(f'LISTEN "deferq:{schema}"')
        yield conn


ENQUEUES = {
    "one": lambda app, n: app.enqueue("noop", [n]),
    "keyed": lambda app, n: app.enqueue("noop", [n], key=f"k{n}"),  # the ON CONFLICT statement
    "batch": lambda app, n: app.enqueue_many([Call("noop", (n, i), {}, JobOptions.parse()) for i in range(3)]),
}


@pytest.mark.parametrize("how", sorted(ENQUEUES))
def test_postgres_enqueue_notifies_only_while_a_worker_waits(pg_app, pg_listen, how):
    import psycopg

    backend = pg_app.backend
    ENQUEUES[how](pg_app, 1)
    assert notifications(pg_listen, 0.2) == []  # nobody waits: no notification to pay for
    with psycopg.connect(POSTGRES_BASE, autocommit=True) as waiter:
        assert backend.begin_wait(waiter)  # what an idle worker holds while it waits
        ENQUEUES[how](pg_app, 2)
        assert notifications(pg_listen, 2.0) == ["default"]
        waiter.execute(backend.q["wait_end"])
        ENQUEUES[how](pg_app, 3)  # nobody waits again: silent
        assert notifications(pg_listen, 0.2) == []


def test_postgres_idle_worker_is_woken_by_an_enqueue_elsewhere_and_then_stops_waiting(
    pg_app, pg_listen, postgres_url
):
    producer = deferq.App(postgres_url)  # its own connections
    try:
        assert waited(pg_app.backend, 5.0, lambda: producer.enqueue("noop", [1])) < 1.0
        assert notifications(pg_listen, 0.2) == ["default"]
        producer.enqueue("noop", [2])  # the worker no longer waits: nobody is told
        assert notifications(pg_listen, 0.2) == []
    finally:
        producer.close()


def test_postgres_worker_starting_to_wait_during_an_enqueue_transaction_sees_its_commit(pg_app):
    """The enqueue found nobody waiting (so it will not notify) and holds the wait lock
    until its commit: the worker cannot say it waits, looks again shortly, and finds
    the job right after the commit, long before its 5 s timeout."""
    import psycopg

    with psycopg.connect(POSTGRES_BASE) as conn:
        pg_app.enqueue("noop", [1], connection=conn)
        timer = threading.Timer(0.3, conn.commit)
        start = time.monotonic()
        timer.start()
        try:
            pg_app.backend.wait_for_work(["default"], 5.0)
        finally:
            timer.join()
    assert 0.25 < time.monotonic() - start < 1.0
    assert len(pg_app.backend.reserve(["default"], 1, "w", 5, (0, 1, 2))) == 1


def test_postgres_no_wakeup_is_lost_around_the_start_of_a_wait(pg_app, postgres_url):
    """Enqueues at random moments around a worker's start of waiting, in autocommit or
    in a transaction committed a little later (open while the worker starts waiting,
    or not): every wait ends with the job found, in well under its 5 s timeout."""
    import psycopg

    producer = deferq.App(postgres_url)
    rng = random.Random(30)
    backend = pg_app.backend
    try:
        backend.wait_for_work(["default"], 0.01)  # connected and listening
        for _ in range(40):
            delay, hold, start_wait = rng.uniform(0, 0.003), rng.uniform(0, 0.01), rng.uniform(0, 0.006)
            conn = psycopg.connect(POSTGRES_BASE) if rng.random() < 0.7 else None

            def produce(delay: float = delay, hold: float = hold, conn=conn) -> None:
                time.sleep(delay)
                if conn is None:
                    producer.enqueue("noop", [1])
                    return
                producer.enqueue("noop", [1], connection=conn)
                time.sleep(hold)
                conn.commit()

            thread = threading.Thread(target=produce)
            start = time.monotonic()
            thread.start()
            try:
                time.sleep(start_wait)
                found: list = []
                while not found and time.monotonic() - start < 5.0:
                    backend.wait_for_work(["default"], 5.0)
                    found = backend.reserve(["default"], 1, "w", 5, (0, 1, 2))
            finally:
                thread.join()
                if conn is not None:
                    conn.close()
            assert found and time.monotonic() - start < 1.0
    finally:
        producer.close()


def test_mysql_polling_notices_a_job_quickly(mysql_url):
    app = deferq.App(mysql_url, lease=5)
    try:
        app.backend.wait_for_work(["default"], 0.3)  # idle long enough to poll at POLL_MAX
        # within a poll, long before the 3 s wait ends (the slack: a busy machine's scheduling)
        assert waited(app.backend, 3.0, lambda: app.enqueue("noop", [1])) < POLL_MAX + 0.5
    finally:
        app.close()


def test_postgres_a_wake_wakes_the_waiter(pg_app, postgres_url):
    """A job waiting for its due time made due now (a durable wait's event, a parent's
    last child) wakes an idle worker, from a process whose first statement is that wake."""
    job = pg_app.enqueue("noop", [1], delay=100)
    other = deferq.App(postgres_url)
    try:
        assert waited(pg_app.backend, 3.0, lambda: other.backend.wake(job.id)) < 1.0
        assert other.backend.wake_many([job.id]) == 0  # due already
    finally:
        other.close()
    assert len(pg_app.backend.reserve(["default"], 1, "w", 5, (0, 1, 2))) == 1
