"""The worker in this process: outcomes, retries, hooks, async tasks, timeouts, slots."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import deferq
from deferq.job import JobState
from deferq.worker import Worker, WorkerConfig
from tests.conftest import STORES

pytestmark = pytest.mark.parametrize("store_url", STORES, indirect=True)


def start_worker(app, **config):
    worker = Worker(app, WorkerConfig(**{"queues": ("default",), "concurrency": 4, **config}))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def stop_worker(worker, thread):
    worker.stop()
    thread.join(timeout=10)
    assert not thread.is_alive()


def wait_for_state(app, job_id, *states, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = app.get(job_id)
        if job is not None and job.state in states:
            return job
        time.sleep(0.01)
    raise AssertionError(f"job {job_id} is {app.get(job_id).state}, not {states}")


def test_burst_runs_everything_then_exits(app):
    @app.task()
    def double(x):
        return x * 2

    jobs = [double.enqueue(i) for i in range(20)]
    worker = Worker(app, WorkerConfig(burst=True))
    assert worker.run() == 0
    assert [app.get(j.id).result for j in jobs] == [i * 2 for i in range(20)]


def test_a_burst_exits_after_its_last_job_without_waiting_a_poll_interval(app):
    """A burst waits on its own running jobs, not on the store: with a poll interval
    of a minute, it still ends as soon as the last job has settled."""

    @app.task()
    def pause(x):
        time.sleep(0.05 * (x % 3))
        return x

    jobs = [pause.enqueue(i) for i in range(12)]
    worker = Worker(app, WorkerConfig(burst=True, concurrency=4, idle_wait=60.0, schedules=False))
    done = threading.Thread(target=worker.run, daemon=True)
    done.start()
    done.join(timeout=30)  # a wait on the empty store would last the poll interval, 60 s
    assert not done.is_alive()
    assert [app.get(j.id).result for j in jobs] == list(range(12))


def test_once_runs_one_job(app):
    @app.task()
    def f(x):
        return x

    jobs = [f.enqueue(i) for i in range(3)]
    assert Worker(app, WorkerConfig(once=True)).run() == 0
    assert [app.get(j.id).state for j in jobs] == ["succeeded", "queued", "queued"]


def test_failures_retry_with_backoff_then_succeed(app):
    calls = []

    @app.task(max_attempts=3, backoff=deferq.backoff.fixed(0.2))
    def flaky():
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise RuntimeError(f"failure {len(calls)}")
        return "ok"

    job = flaky.enqueue()
    worker, thread = start_worker(app)
    try:
        done = wait_for_state(app, job.id, JobState.SUCCEEDED)
    finally:
        stop_worker(worker, thread)
    assert done.attempts == 3 and done.result == "ok"
    assert all(b - a >= 0.19 for a, b in zip(calls, calls[1:]))


def test_dead_after_max_attempts_with_hooks(app):
    seen = []

    @app.task(max_attempts=2, backoff=deferq.backoff.fixed(0),
              on_failure=lambda j, e: seen.append(("task", j.state)))
    def broken():
        raise ValueError("always")

    app.on("retrying")(lambda job, exc: seen.append(("retrying", job.attempts)))
    app.on("dead")(lambda job, exc: seen.append(("dead", type(exc).__name__)))
    job = broken.enqueue()
    worker, thread = start_worker(app)
    try:
        dead = wait_for_state(app, job.id, JobState.DEAD)
        deadline = time.monotonic() + 5
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop_worker(worker, thread)
    assert dead.attempts == 2 and "ValueError: always" in dead.error
    assert seen == [("retrying", 1), ("task", "dead"), ("dead", "ValueError")]


def test_retry_exception_picks_the_delay(app):
    @app.task(max_attempts=2)
    def later():
        if app.get_by_key("later-done") is None:
            raise deferq.Retry(delay=0.3)

    job = later.enqueue()
    worker, thread = start_worker(app)
    try:
        retried = wait_for_state(app, job.id, JobState.SCHEDULED)
        assert retried.run_at - retried.created_at >= 0.3
        assert "Retry" in retried.error
        dead = wait_for_state(app, job.id, JobState.DEAD)
    finally:
        stop_worker(worker, thread)
    assert dead.attempts == 2


def test_unknown_task_goes_dead_and_worker_keeps_going(app):
    @app.task()
    def known():
        return 1

    ghost = app.enqueue("ghost", [1])
    good = known.enqueue()
    assert Worker(app, WorkerConfig(burst=True)).run() == 0
    assert app.get(ghost.id).state == JobState.DEAD
    assert app.get(ghost.id).error == "unknown task 'ghost'"
    assert app.get(good.id).state == JobState.SUCCEEDED


def test_async_tasks_run_on_the_loop_and_time_out(app):
    loop_threads = set()

    @app.task()
    async def fetch(x):
        loop_threads.add(threading.current_thread().name)
        await asyncio.sleep(0.01)
        return x + 1

    @app.task(timeout=0.2, max_attempts=1)
    async def stuck():
        await asyncio.sleep(30)

    ok, slow = fetch.enqueue(1), stuck.enqueue()
    started = time.monotonic()
    assert Worker(app, WorkerConfig(burst=True)).run() == 0
    assert time.monotonic() - started < 5
    assert app.get(ok.id).result == 2
    assert loop_threads == {"deferq-async"}
    assert app.get(slow.id).state == JobState.DEAD
    assert "timed out after 0.2s" in app.get(slow.id).error


def test_sync_tasks_never_run_on_the_loop_thread(app):
    names = []

    @app.task()
    def where():
        names.append(threading.current_thread().name)

    @app.task()
    async def touch():
        return None

    touch.enqueue()
    for _ in range(5):
        where.enqueue()
    Worker(app, WorkerConfig(burst=True)).run()
    assert names and all(n.startswith("deferq-run") for n in names)


def test_overran_sync_job_fails_its_attempt_and_worker_exits_3(app):
    release = threading.Event()

    @app.task(timeout=0.2, max_attempts=3, backoff=deferq.backoff.fixed(30))
    def hangs():
        release.wait(10)

    job = hangs.enqueue()
    worker = Worker(app, WorkerConfig(grace=0.5))
    try:
        assert worker.run() == 3
    finally:
        release.set()
    failed = app.get(job.id)
    assert failed.state == JobState.SCHEDULED and failed.attempts == 1
    assert "timed out after 0.2s" in failed.error


def test_leases_only_free_slots(app):
    gate = threading.Event()
    running = []

    @app.task()
    def slow(i):
        running.append(i)
        gate.wait(10)

    @app.task()
    def quick():
        return "quick"

    for i in range(2):
        slow.enqueue(i)
    worker, thread = start_worker(app, concurrency=3)
    try:
        deadline = time.monotonic() + 5
        while len(running) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        # two slots busy, one free: a new job must start at once, not wait behind them
        job = quick.enqueue()
        assert wait_for_state(app, job.id, JobState.SUCCEEDED, timeout=5).result == "quick"
        active = app.stats()["default"]["active"]
        assert active == 2
    finally:
        gate.set()
        stop_worker(worker, thread)


def test_graceful_stop_releases_unfinished_jobs(app):
    gate = threading.Event()

    @app.task()
    def blocked():
        gate.wait(10)

    job = blocked.enqueue()
    worker, thread = start_worker(app, grace=0.3)
    try:
        wait_for_state(app, job.id, JobState.ACTIVE)
        stop_worker(worker, thread)
    finally:
        gate.set()
    back = app.get(job.id)
    assert back.state == JobState.QUEUED and back.attempts == 0


def test_jobs_ending_together_share_one_settle_round_trip(app):
    """The settler, woken by the first of several running jobs to end, waits (briefly)
    for the others: short jobs that end within a fraction of a millisecond of each other
    are settled once each, in shared calls (usually one; a loaded machine may split it)."""
    together = threading.Barrier(8, timeout=10)

    @app.task()
    def short(i):
        together.wait()
        time.sleep(0.00002 * i)  # they end one after another, each letting the settler run
        return i

    jobs = [short.enqueue(i) for i in range(8)]
    worker = Worker(app, WorkerConfig(queues=("default",), concurrency=8, burst=True))
    settle_calls = []
    settle_and_reserve = worker.backend.settle_and_reserve

    def counted(outcomes, *args):
        settle_calls.append(len(outcomes))
        return settle_and_reserve(outcomes, *args)

    worker.backend = type("Counted", (), {"__getattr__": lambda _, name: getattr(app.backend, name),
                                          "settle_and_reserve": staticmethod(counted)})()
    assert worker.run() == 0
    assert [app.get(job.id).result for job in jobs] == list(range(8))
    assert sum(settle_calls) == 8 and len(settle_calls) <= 4, settle_calls  # each once, in batches


def test_the_settler_waits_for_the_running_jobs_until_the_last_one_ends(app, monkeypatch):
    """How a batch gathers: no wait when nothing runs; else until the last running job
    ends (it wakes the settler), never the whole GATHER when they end sooner."""
    from deferq.backends.base import Outcome, OutcomeKind
    from deferq.worker import worker as worker_module

    @app.task()
    def quick():
        return None

    worker = Worker(app, WorkerConfig(queues=("default",), concurrency=4))
    started = time.monotonic()
    worker._gather()  # nothing runs: at once
    assert not worker.gathering and time.monotonic() - started < 1
    monkeypatch.setattr(worker_module, "GATHER", 30.0)
    worker.busy = 2
    settler = threading.Thread(target=worker._gather)
    settler.start()
    deadline = time.monotonic() + 10
    while not worker.gathering and time.monotonic() < deadline:
        time.sleep(0.001)
    first, last = quick.enqueue(), quick.enqueue()
    worker._finished(first, Outcome(first, OutcomeKind.SUCCEEDED), None)
    settler.join(0.2)
    assert settler.is_alive()  # one job still runs: the settler waits on
    worker._finished(last, Outcome(last, OutcomeKind.SUCCEEDED), None)
    settler.join(10)
    assert not settler.is_alive() and not worker.gathering and worker.outcomes.qsize() == 2
