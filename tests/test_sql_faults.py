"""Faults on PostgreSQL and MariaDB with real worker processes (issue 4):

- a worker killed with SIGKILL mid-job: its jobs come back after the lease, none lost;
- every connection of the run killed (pg_terminate_backend / KILL) three times while
  10,000 jobs are enqueued and processed: workers reconnect and keep going, every
  committed enqueue is processed, no worker exits.

The shared servers are never restarted (other suites use them): killing connections
is what a restart or failover does to a client.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

import deferq
from deferq.errors import StoreUnavailable
from tests.test_crash import run_crash_scenario, start_worker, wait_for

pytestmark = pytest.mark.slow

JOBS = 10_000


def test_sigkilled_workers_lose_nothing_postgres(postgres_url, tmp_path):
    run_crash_scenario(postgres_url, tmp_path)


def test_sigkilled_workers_lose_nothing_mysql(mysql_url, tmp_path):
    run_crash_scenario(mysql_url, tmp_path)


def produce(app: deferq.App, committed: list[str], stop: threading.Event) -> None:
    """Enqueue JOBS no-op jobs in batches of 100; remember the batches that committed.
    A batch cut off by a killed connection is sent again (its fate is unknown: if it
    did commit, its jobs run too, they are just not counted)."""
    noop = deferq.Call("noop", (0,), {})
    while len(committed) < JOBS and not stop.is_set():
        try:
            jobs = app.enqueue_many([noop] * 100)
        except StoreUnavailable:
            time.sleep(0.05)
            continue
        committed.extend(job.id for job in jobs)


def run_connection_kills(url: str, kill_all, count_succeeded, tmp_path) -> None:
    """Workers and a producer on `url`; `kill_all()` kills their connections three
    times during the run; `count_succeeded(ids)` reads the outcome from the database."""
    record = tmp_path / "record.log"
    app = deferq.App(url)
    committed: list[str] = []
    stop = threading.Event()
    producer = threading.Thread(target=produce, args=(app, committed, stop), daemon=True)
    workers = [start_worker(url, record, concurrency=8) for _ in range(2)]
    try:
        producer.start()
        for target in (JOBS // 5, JOBS // 2, JOBS * 4 // 5):
            wait_for(lambda t=target: len(committed) >= t, 60, f"{target} jobs enqueued")
            assert kill_all() > 0, "no connection of the run was found to kill"
        producer.join(timeout=60)
        assert len(committed) >= JOBS
        wait_for(lambda: count_succeeded(committed) == len(committed), 60,
                 "every committed job to succeed")  # fmt: skip
        assert all(worker.poll() is None for worker in workers), "a worker exited"
    finally:
        stop.set()
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.wait(timeout=30)
            except Exception:  # noqa: BLE001 - reap whatever happens
                worker.kill()
                worker.wait(timeout=10)
        app.close()
    logs = b"".join(worker.stderr.read() for worker in workers).decode(errors="replace")
    assert "store unreachable" in logs and "store is back" in logs, logs[-2000:]
    assert "Traceback" not in logs, logs[-4000:]


def test_postgres_connections_killed_mid_run(postgres_admin, postgres_url, tmp_path):
    conn, schema = postgres_admin
    name = f"deferq-fault-{uuid.uuid4().hex[:8]}"
    url = f"{postgres_url}&application_name={name}"

    def kill_all() -> int:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            [name],
        ).fetchall()
        return len(rows)

    def count_succeeded(ids: list[str]) -> int:
        return conn.execute(
            f'SELECT count(*) FROM "{schema}".deferq_jobs WHERE id = ANY(%s) AND state = %s',
            [ids, "succeeded"],
        ).fetchone()[0]

    run_connection_kills(url, kill_all, count_succeeded, tmp_path)


def test_mysql_connections_killed_mid_run(mysql_admin, mysql_url, tmp_path):
    conn, database = mysql_admin

    def kill_all() -> int:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT id FROM information_schema.processlist WHERE db = %s AND id <> CONNECTION_ID()",
                (database,),
            )
            ids = [row[0] for row in cur.fetchall()]
            for thread_id in ids:
                try:
                    cur.execute(f"KILL {int(thread_id)}")
                except Exception:  # noqa: BLE001 - it ended by itself meanwhile
                    pass
        return len(ids)

    def count_succeeded(ids: list[str]) -> int:
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT count(*) FROM `{database}`.deferq_jobs WHERE id IN %s AND state = %s",
                (tuple(ids), "succeeded"),
            )
            return cur.fetchone()[0]

    run_connection_kills(mysql_url, kill_all, count_succeeded, tmp_path)
