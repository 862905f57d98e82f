"""Faults on the SQL stores with real worker processes (issues 4 and 11):

- a worker killed with SIGKILL mid-job: its jobs come back after the lease, none lost;
- every connection of the run killed (pg_terminate_backend / KILL) three times while
  10,000 jobs are enqueued and processed: workers reconnect and keep going, every
  committed enqueue is processed exactly once, no worker exits;
- a user's process without logging set up sees no psycopg_pool warnings about the
  connections it discards, only deferq's one sentence;
- three workers on MariaDB with `?claim=update`: deadlocks among them are retried,
  never reported as an outage;
- SQLite on a real full disk (an 8 MB tmpfs): StoreFull naming it, nothing that was
  acknowledged lost, and all well again once there is room.

The shared servers are never restarted (other suites use them): killing connections
is what a restart or failover does to a client.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import deferq
from deferq.errors import StoreUnavailable
from tests.process.test_crash import ROOT, read_record, run_crash_scenario, start_worker, wait_for
from tests.support.supervisor_harness import TREE_PATH

pytestmark = pytest.mark.slow

JOBS = 10_000


def test_sigkilled_workers_lose_nothing_postgres(postgres_url, tmp_path):
    run_crash_scenario(postgres_url, tmp_path)


def test_sigkilled_workers_lose_nothing_mysql(mysql_url, tmp_path):
    run_crash_scenario(mysql_url, tmp_path)


def produce(app: deferq.App, committed: dict[str, int], stop: threading.Event) -> None:
    """Enqueue JOBS numbered jobs (tests/support/fixtures.py `record`) in batches of 100;
    remember the batches that committed (id -> number). A batch cut off by a killed
    connection is sent again with new numbers (its fate is unknown: if it did commit,
    its jobs run too, they are just not counted)."""
    numbers = itertools.count()
    while len(committed) < JOBS and not stop.is_set():
        batch = [next(numbers) for _ in range(100)]
        try:
            jobs = app.enqueue_many([deferq.Call("record", (n,), {}) for n in batch])
        except StoreUnavailable:
            time.sleep(0.05)
            continue
        committed.update((job.id, n) for job, n in zip(jobs, batch, strict=True))


def run_connection_kills(url: str, kill_all, count_succeeded, tmp_path) -> None:
    """Workers and a producer on `url`; `kill_all()` kills their connections three
    times during the run; `count_succeeded(ids)` reads the outcome from the database.
    Every committed job succeeds, and runs once: a connection dying under a claim or a
    settle never makes a job run twice."""
    record = tmp_path / "record.log"
    app = deferq.App(url)
    committed: dict[str, int] = {}
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
        ids = list(committed)
        wait_for(lambda: count_succeeded(ids) == len(ids), 60, "every committed job to succeed")
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
    starts, _ = read_record(record)
    twice = sorted(n for n in committed.values() if starts[n] > 1)
    assert not twice, f"{len(twice)} committed jobs ran more than once: {twice[:10]}"


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


NOISE = """
import sys, psycopg, deferq
app = deferq.App(sys.argv[1])
app.enqueue("noop", [1]); app.stats()  # both pools hold connections now
with psycopg.connect(sys.argv[2], autocommit=True) as admin:
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                  [sys.argv[3]])
for _ in range(3):
    try:
        app.enqueue("noop", [1]); app.stats(); print("ok")
    except deferq.StoreUnavailable as exc:
        print("StoreUnavailable:", exc)
app.close()
"""


def test_postgres_pool_noise_is_not_printed_into_a_user_process(postgres_admin, postgres_url):
    """A process that set up no logging sees deferq's one sentence about the killed
    connections, not psycopg_pool's warnings about each connection it discards."""
    from tests.support.stores.postgres import BASE_URL

    name = f"deferq-noise-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [sys.executable, "-c", NOISE, f"{postgres_url}&application_name={name}", BASE_URL, name],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("StoreUnavailable: PostgreSQL is unavailable") <= 1, done.stdout
    assert done.stdout.strip().endswith("ok"), done.stdout
    assert done.stderr == "", done.stderr


def test_mysql_claim_update_three_workers_see_no_outage(mysql_update_url, tmp_path):
    """`?claim=update` (servers without SKIP LOCKED): three workers contend for the
    same rows; a deadlock or lock wait among them is retried, not reported as the
    store going away, and no job runs twice."""
    record = tmp_path / "record.log"
    app = deferq.App(mysql_update_url)
    jobs = 2000
    app.enqueue_many([deferq.Call("record", (n,), {}) for n in range(jobs)])
    workers = [start_worker(mysql_update_url, record, concurrency=8) for _ in range(3)]
    try:
        wait_for(lambda: app.stats()["default"]["succeeded"] == jobs, 60, "every job to succeed")
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=30)
        app.close()
    logs = b"".join(worker.stderr.read() for worker in workers).decode(errors="replace")
    assert "store unreachable" not in logs and "lease lost" not in logs, logs[-3000:]
    starts, _ = read_record(record)
    assert set(starts) == set(range(jobs)) and max(starts.values()) == 1

# -- SQLite on a full disk ------------------------------------------------------------


def full_disk_scenario(directory: str) -> dict:
    """Run inside a private mount namespace with an 8 MB tmpfs at `directory` (see the
    test below): a worker runs while a producer enqueues until the disk is full, room
    is made, and both carry on. Returns what the test checks."""
    import errno
    import logging

    from deferq.worker import Worker, WorkerConfig

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logging.getLogger("deferq.worker").addHandler(Keep())
    path = Path(directory)
    # 8 MB: the schema, its indexes and a WAL that cannot be checkpointed while the disk
    # is full must still fit once the ballast is gone (2 MB no longer did). A short
    # lease: a job whose settle met the full disk comes back within the wait below.
    app = deferq.App(f"sqlite:///{path}/deferq.db", lease=3)

    @app.task()
    def pad(blob: str) -> None:
        pass

    blob = "x" * 4000
    acknowledged = [pad.enqueue(blob).id for _ in range(10)]
    worker = Worker(app, WorkerConfig(concurrency=2, idle_wait=0.1))
    runner = threading.Thread(target=worker.run, daemon=True)  # a failed step still ends the process
    runner.start()
    # Unbuffered: a buffered file keeps the bytes the full disk refused and raises
    # ENOSPC again from truncate() or close().
    with (path / "ballast").open("wb", buffering=0) as ballast:  # fill the disk
        try:
            while True:
                ballast.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        ballast.truncate(max(ballast.tell() - 512 * 1024, 0))  # room for some more jobs, not many
    full_error = None
    for _ in range(2000):
        try:
            acknowledged.append(pad.enqueue(blob).id)
        except deferq.StoreFull as exc:
            full_error = str(exc)
            break
    time.sleep(1)  # the worker meets the full disk too (its settles fail), and waits
    (path / "ballast").unlink()  # make room
    after = pad.enqueue(blob).id
    acknowledged.append(after)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and app.stats().get("default", {}).get("succeeded", 0) < len(acknowledged):
        time.sleep(0.1)
    worker.stop()
    runner.join(30)
    states = [app.get(job_id).state for job_id in acknowledged]
    app.close()
    others = {i: str(state) for i, state in zip(acknowledged, states, strict=True) if state != "succeeded"}
    return {"full_error": full_error, "acknowledged": len(acknowledged), "not_succeeded": others,
            "succeeded": states.count("succeeded"), "exit": worker.exit_code, "log": lines}


def in_a_small_tmpfs(directory: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run `python -c code` with an 8 MB tmpfs mounted at `directory`, in a mount
    namespace of its own (as root; else a user namespace), so the mount dies with it."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare: cannot mount a small tmpfs to fill")
    namespace = ["--mount"] if os.geteuid() == 0 else ["--user", "--map-root-user", "--mount"]
    mount = 'mount -t tmpfs -o size=8m deferq-full "$0" && exec "$@"'
    env = {**os.environ, "PYTHONPATH": TREE_PATH}
    done = subprocess.run(
        ["unshare", *namespace, "sh", "-c", mount, str(directory), sys.executable, "-c", code],
        capture_output=True, text=True, timeout=90, cwd=ROOT, env=env,
    )
    if done.returncode != 0 and ("mount" in done.stderr or "unshare" in done.stderr):
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()[:200]}")
    return done


def test_sqlite_on_a_full_disk_says_so_loses_nothing_and_recovers(tmp_path):
    """A real full disk, not a size limit: enqueue raises StoreFull naming it, every
    enqueue that returned is kept and processed, and once room is made enqueues and
    the worker carry on."""
    disk = tmp_path / "disk"
    disk.mkdir()
    code = (
        "import json, sys; from tests.stores.test_sql_faults import full_disk_scenario; "
        f"print('RESULT ' + json.dumps(full_disk_scenario({str(disk)!r})))"
    )
    done = in_a_small_tmpfs(disk, code)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    error = result["full_error"]
    assert error and "out of space" in error and "disk is full" in error and str(disk) in error, error
    assert result["succeeded"] == result["acknowledged"] > 11, result  # some went in near the end
    assert result["exit"] == 0
    # the worker's loop or its status thread, whichever met the full disk first, says why
    outages = [line for line in result["log"] if "unreachable" in line or "cannot be reached" in line]
    assert outages and all("out of space" in line for line in outages), result["log"]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
