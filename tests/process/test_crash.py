"""Crash tests with real processes: SIGKILL workers mid-run and restart them (nothing
lost, and only the jobs a killed worker held run again: at most concurrency + prefetch
per kill); SIGSTOP a worker past its lease (the job is taken over, and the stopped
worker's outcome is refused when it wakes: lease fencing); a poison job that kills its
worker every time (dead after max_attempts, the supervisor replaces the workers)."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import deferq
from tests.support.supervisor_harness import ROOT, TREE_PATH

pytestmark = pytest.mark.slow


CONCURRENCY = 4  # start_worker's; prefetch is the worker's default, = concurrency
MOST_STARTED = 2 * CONCURRENCY  # leases of started jobs a worker may hold: concurrency + prefetch
# and with the jobs leased ahead (while jobs run shorter than a round trip: up to
# concurrency more, never started, so never re-run by a kill; docs/worker.md)
MOST_HELD = MOST_STARTED + CONCURRENCY


def start_worker(url: str, record: Path, concurrency: int = CONCURRENCY, *options: str) -> subprocess.Popen:
    env = {**os.environ, "DEFERQ_URL": url, "DEFERQ_TEST_RECORD": str(record), "PYTHONPATH": TREE_PATH}
    return subprocess.Popen(
        [sys.executable, "-m", "deferq", "worker", "--app", "tests.support.fixtures:app",
         "--url", url, "-c", str(concurrency), "--log-level", "warning", *options],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def read_record(record: Path) -> tuple[Counter, Counter]:
    starts, dones = Counter(), Counter()
    if record.exists():
        for line in record.read_text().splitlines():
            kind, _, i = line.partition(" ")
            (starts if kind == "start" else dones)[int(i)] += 1
    return starts, dones


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def all_succeeded(app: deferq.App, jobs: int) -> bool:
    return app.stats().get("default", {}).get("succeeded", 0) == jobs


def stop_all(workers: list[subprocess.Popen], app: deferq.App) -> None:
    for worker in workers:
        worker.kill()
        worker.wait(timeout=10)
    app.close()


def run_crash_scenario(url: str, tmp_path: Path, jobs: int = 1000) -> None:
    """SIGKILL each of two workers once at a random moment and restart it: every job
    completes, and only jobs the store had leased to a killed worker run again (a job
    can finish and still be unsettled when the kill lands, so "in flight" is what the
    store says, not what the job recorded), never more than concurrency + prefetch of
    them per kill. Every store runs this (test_sql_faults.py, below for Redis)."""
    record = tmp_path / "record.log"
    app = deferq.App(url)
    app.enqueue_many([deferq.Call("record", (i, 0.003), {}) for i in range(jobs)])
    workers = [start_worker(url, record), start_worker(url, record)]
    held_at_kills = []
    try:
        for index in range(2):
            target = random.randint(jobs * (index + 1) // 4, jobs * (index + 2) // 4)
            wait_for(lambda t=target: sum(read_record(record)[1].values()) >= t, 60, f"{target} done")
            killed = workers[index]
            killed.send_signal(signal.SIGKILL)
            killed.wait(timeout=10)
            # in flight = what the store says the dead worker held: its leases
            held = app.list_jobs("active", limit=jobs)
            held_at_kills.append(sum(1 for job in held if f":{killed.pid}:" in (job.worker or "")))
            workers[index] = start_worker(url, record)
        wait_for(lambda: all_succeeded(app, jobs), 90, "every job to succeed")
    finally:
        stop_all(workers, app)
    starts, dones = read_record(record)
    assert set(dones) == set(range(jobs)), "a job never completed"
    assert sum(held_at_kills) > 0, "the kills landed while the workers held nothing"
    assert max(held_at_kills) <= MOST_HELD, f"a worker held {held_at_kills} leases when killed"
    reruns = sum(starts.values()) - jobs
    assert reruns <= min(sum(held_at_kills), MOST_STARTED * len(held_at_kills)), (reruns, held_at_kills)


def test_sigkilled_workers_lose_nothing_sqlite(tmp_path):
    run_crash_scenario(f"sqlite:///{tmp_path}/crash.db", tmp_path)


def test_sigkilled_workers_lose_nothing_redis(redis_url, tmp_path):
    run_crash_scenario(redis_url, tmp_path)


def test_workers_killed_while_they_wait_lose_nothing_redis(redis_url, tmp_path):
    """An idle worker's wait carries its lease script behind the BLPOP (docs/redis.md):
    jobs trickle in one at a time to two mostly idle workers, one of which is SIGKILLed
    and restarted after every few jobs. Every job completes (a lease whose answer died
    with its worker expires, and the job runs again), and only a kill re-runs a job."""
    record = tmp_path / "record.log"
    app = deferq.App(redis_url)
    workers = [start_worker(redis_url, record), start_worker(redis_url, record)]
    born = [time.monotonic()] * 2
    jobs, kills, rng = 100, 0, random.Random()
    try:
        for i in range(jobs):
            app.enqueue("record", [i, 0.0])
            time.sleep(rng.uniform(0.01, 0.06))  # the scenario: a job now and then, workers idle between
            victim = rng.randrange(2)
            if time.monotonic() - born[victim] > 1.0 and rng.random() < 0.2:  # up and waiting by now
                workers[victim].kill()
                workers[victim].wait(timeout=10)
                workers[victim], born[victim] = start_worker(redis_url, record), time.monotonic()
                kills += 1
        wait_for(lambda: all_succeeded(app, jobs), 60, "every job to succeed")
    finally:
        stop_all(workers, app)
    starts, dones = read_record(record)
    assert set(dones) == set(range(jobs)), "a job never completed"
    assert kills >= 2 and sum(starts.values()) - jobs <= kills * MOST_HELD


def stop_resumed(*workers: subprocess.Popen | None) -> None:
    """Stop workers a test may have frozen (SIGSTOP): resumed first, then killed."""
    for worker in workers:
        if worker is not None:
            os.kill(worker.pid, signal.SIGCONT)
            worker.kill()
            worker.wait(timeout=10)


def start_fault_worker(url: str, record: Path, log: Path) -> subprocess.Popen:
    """A worker of tests/support/fixtures_faults.py (lease 2 s), one slot, its log in `log`."""
    env = {**os.environ, "DEFERQ_URL": url, "DEFERQ_TEST_RECORD": str(record), "PYTHONPATH": TREE_PATH,
           "DEFERQ_TEST_LEASE": "2"}
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "deferq", "worker", "--app", "tests.support.fixtures_faults:app",
             "--url", url, "-c", "1", "--log-level", "info"],
            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=out,
        )


def stop_between_writes(worker: subprocess.Popen, path: str) -> None:
    """SIGSTOP a SQLite worker, but not while it holds the write lock (a stopped writer
    would stop every process on the file: that is SQLite, not what this test is about)."""
    for _ in range(50):
        os.kill(worker.pid, signal.SIGSTOP)
        probe = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            os.kill(worker.pid, signal.SIGCONT)
            time.sleep(0.01)
        finally:
            probe.close()
    raise AssertionError("the worker always held the SQLite write lock")


def slot_notes(record: Path, what: str) -> list[tuple[int, str, int, int]]:
    """The fenced task's "<what> <pid> <job id> <attempt> <value>" lines."""
    lines = record.read_text().splitlines() if record.exists() else []
    return [(int(pid), job_id, int(n), int(value))
            for kind, pid, job_id, n, value in map(str.split, lines) if kind == what]


@pytest.mark.parametrize("store", ["sqlite", "redis", "postgres", "mysql"])
def test_a_worker_stopped_past_its_lease_loses_its_concurrency_slot_and_says_so(store, request, tmp_path):
    """concurrency=1 is a lease: SIGSTOP the slot's holder past its lease and the job
    runs again elsewhere under the same key, with a larger fence. On SIGCONT the first
    worker logs that its run lost its slot, and its task sees holds_slot() False."""
    url = request.getfixturevalue(f"{store}_url")
    record, first_log = tmp_path / "record.log", tmp_path / "first.log"
    app = deferq.App(url)
    job = app.enqueue("fenced", ["acme", 8.0])
    first = start_fault_worker(url, record, first_log)
    second = None
    try:
        wait_for(lambda: slot_notes(record, "fence"), 30, "the first run")
        if store == "sqlite":
            stop_between_writes(first, url.split("///", 1)[1])
        else:
            os.kill(first.pid, signal.SIGSTOP)
        second = start_fault_worker(url, record, tmp_path / "second.log")
        wait_for(lambda: len(slot_notes(record, "fence")) == 2, 30, "the second worker to take the job over")
        (pid1, _, attempt1, fence1), (pid2, _, attempt2, fence2) = slot_notes(record, "fence")
        assert (pid1, attempt1, pid2, attempt2) == (first.pid, 1, second.pid, 2)
        assert fence2 > fence1 >= 1, "the second holder's fence is not larger"
        os.kill(first.pid, signal.SIGCONT)  # its task sleeps on: its heartbeat finds the slot gone
        warning = f"job {job.id} of task fenced lost its concurrency slot account:acme (fence {fence1}) after"
        wait_for(lambda: warning in first_log.read_text(), 10, "the first worker's warning")
        assert "another job may be running under the same key" in first_log.read_text()
        wait_for(lambda: slot_notes(record, "holds"), 15, "the first run to end")
        assert slot_notes(record, "holds")[0] == (first.pid, job.id, 1, 0), "the stale run still holds the slot"
        assert first_log.read_text().count("lost its concurrency slot") == 1  # said once
    finally:
        stop_resumed(first, second)
        app.close()


@pytest.mark.parametrize("store", ["sqlite", "redis", "postgres"])
def test_a_worker_stopped_past_its_lease_cannot_overwrite_the_new_owner(store, request, tmp_path):
    """SIGSTOP a worker mid-job until its lease expires: another worker takes the job
    over (attempt 2). SIGCONT the first while the second still runs it: the first's
    outcome is refused (fenced by worker and attempt), and the job ends with the second
    worker's result."""
    from tests.support.fixtures_faults import runs

    url = request.getfixturevalue(f"{store}_url")
    record = tmp_path / "record.log"
    app = deferq.App(url)
    job = app.enqueue("stamp", [3.0])
    first = start_fault_worker(url, record, tmp_path / "first.log")
    second = None
    try:
        wait_for(lambda: [pid for pid, _, _ in runs(record)] == [first.pid], 30, "the first run")
        if store == "sqlite":
            stop_between_writes(first, url.split("///", 1)[1])
        else:
            os.kill(first.pid, signal.SIGSTOP)
        second = start_fault_worker(url, record, tmp_path / "second.log")
        wait_for(lambda: len(runs(record)) == 2, 30, "the second worker to take the job over")
        assert runs(record)[1] == (second.pid, job.id, 2)
        taken = app.get(job.id)
        assert taken.state == "active" and taken.attempts == 2 and f":{second.pid}:" in taken.worker
        os.kill(first.pid, signal.SIGCONT)  # its 3 s have passed: its job returns at once
        first_log = tmp_path / "first.log"
        wait_for(lambda: "outcome dropped" in first_log.read_text(), 10, "the first worker's outcome refused")
        now = app.get(job.id)
        assert (now.state, now.attempts, now.worker) == ("active", 2, taken.worker), "the stale outcome landed"
        wait_for(lambda: app.get(job.id).state == "succeeded", 20, "the second run to succeed")
        done = app.get(job.id)
        assert (done.result, done.attempts) == (second.pid, 2), "the store kept the stale outcome"
        assert len(runs(record)) == 2
    finally:
        stop_resumed(first, second)
        app.close()


def test_a_poison_job_ends_dead_after_max_attempts_and_the_pool_lives_on(tmp_path):
    """A job that SIGKILLs its worker every time: each attempt is counted when it is
    leased, so the third lease expiry makes it dead; the supervisor replaces the killed
    workers, and the other jobs all succeed. One slot per worker: a job running beside
    the poison in the same process dies with it, attempt after attempt (the README says
    so), which is not what this test is about."""
    from tests.support.supervisor_harness import Master, job_states, runs, wait_until

    url = f"sqlite:///{tmp_path}/poison.db"
    pool = 'check_every = "0.2s"\n[pools.main]\nqueues = ["default"]\nprocesses = 2\nconcurrency = 1\n'
    master = Master(tmp_path, url, pool).start()
    store = deferq.App(url)
    try:
        wait_until(lambda: len(master.children()) == 2, 20, "two children")
        poison = store.enqueue("crash", max_attempts=3)
        store.enqueue_many([deferq.Call("nap", (0.05,), {})] * 20)
        dead = wait_until(lambda: (j := store.get(poison.id)).state == "dead" and j, 60, "the poison job dead")
        assert dead.attempts == 3 and "lease expired" in dead.error, dead.error
        assert [attempt for task, _, attempt in runs(master.record) if task == "crash"] == [1, 2, 3]
        wait_until(lambda: job_states(store)["succeeded"] == 20, 30, "the other jobs to succeed")
        wait_until(lambda: len(master.children()) == 2, 20, "the pool back at two children")
        assert master.stop() == 0
    finally:
        master.kill()
        store.close()


def test_overrunning_sync_job_exits_3_under_once_and_the_job_retries(tmp_path):
    """`deferq worker --once` whose job overran exits 3 (without --once the worker
    restarts itself in place and carries on: tests/process/test_worker_overrun.py)."""
    url = f"sqlite:///{tmp_path}/hang.db"
    record = tmp_path / "record.log"
    app = deferq.App(url)
    job = app.enqueue("hang", [1], max_attempts=2)  # by name: the producer sets attempts
    worker = start_worker(url, record, CONCURRENCY, "--once")
    try:
        assert worker.wait(timeout=30) == 3
    finally:
        worker.kill()
    failed = app.get(job.id)
    assert failed.attempts == 1 and "timed out after 0.5s" in failed.error
    assert failed.state in ("scheduled", "queued")
    second = start_worker(url, record, CONCURRENCY, "--once")
    try:
        assert second.wait(timeout=30) == 3
    finally:
        second.kill()
    dead = app.get(job.id)
    assert dead.state == "dead" and dead.attempts == 2
    app.close()


def test_bad_url_is_one_sentence_and_exit_2(tmp_path):
    for url, expect in [
        ("bogus://x", "unknown store URL"),
        (f"sqlite:////proc/nope/{tmp_path.name}/x.db", "cannot open the SQLite database"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "deferq", "enqueue", "t", "--url", url],  # stats makes no store: refused before
            capture_output=True, text=True, timeout=30, cwd=ROOT,
        )
        assert done.returncode == 2, done.stderr
        assert expect in done.stderr and "Traceback" not in done.stderr
