"""Jobs leased ahead: while jobs run shorter than a round trip to the store, a worker
leases a few beyond its free slots; they wait in it for a slot. Such a job's lease is
renewed while it waits, its timeout counts from its start, and a stop gives it back at
once, its attempt not counted, for another worker to run."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

import deferq
from deferq.job import Job, JobState
from deferq.middleware import Middleware
from deferq.worker import Worker, WorkerConfig

pytestmark = pytest.mark.timeout(60)

WARM_UP = 40  # short jobs first: the worker settles a batch, after which it leases ahead
MEASURE = Worker._measure


@pytest.fixture(autouse=True)
def short_jobs_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a job runs shorter than a round trip depends on the machine (on a loaded
    one a no-op job can take longer than an SQLite settle): these tests are about what
    happens to the jobs leased ahead, so each settle measures as short jobs do, and the
    measure itself is tested with set figures below."""
    def as_short_jobs(self: Worker, trip: float, ran: list[float | None]) -> None:
        MEASURE(self, trip, [None if seconds is None else trip / 100 for seconds in ran])

    monkeypatch.setattr(Worker, "_measure", as_short_jobs)


def until(check: Callable[[], object], seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def held_behind(app: deferq.App, worker: Worker, after: list[Job]) -> Job:
    """One of the jobs enqueued `after` the one that blocks the worker's only slot,
    leased by the worker while that one runs."""
    found: list[Job] = []
    ids = {job.id for job in after}

    def leased_ahead() -> bool:
        active = app.backend.list_jobs(JobState.ACTIVE, None, 100)
        found[:] = [j for j in active if j.worker == worker.config.name and j.id in ids]
        return bool(found)

    until(leased_ahead)
    return found[0]


def start(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def short_jobs_then(app: deferq.App, blocking: Callable[[], Job], after: Callable[[], Job]
                    ) -> tuple[Job, list[Job]]:
    @app.task()
    def quick(i: int) -> int:
        return i

    app.enqueue_many([quick.call(i) for i in range(WARM_UP)])
    return blocking(), [after() for _ in range(4)]


@pytest.mark.parametrize("store_url", ["sqlite", "redis"], indirect=True)
def test_a_stop_gives_back_the_jobs_leased_ahead_unspent_and_another_worker_runs_them(app):
    running, release = threading.Event(), threading.Event()

    @app.task()
    def hold() -> None:
        running.set()
        release.wait(20)

    @app.task()
    def later() -> str:
        return "done"

    blocker, after = short_jobs_then(app, hold.enqueue, later.enqueue)
    first = Worker(app, WorkerConfig(concurrency=1, schedules=False, grace=20))
    thread = start(first)
    try:
        assert running.wait(15)
        held = held_behind(app, first, after)
        assert held.attempts == 1  # leased: the store counts an attempt until it is given back
        first.stop()
        until(lambda: app.get(held.id).state == JobState.QUEUED)  # at once: the running job still runs
        assert app.get(blocker.id).state == JobState.ACTIVE
        given_back = app.get(held.id)
        assert given_back.attempts == 0 and given_back.worker is None
    finally:
        release.set()
        thread.join(20)
    assert not thread.is_alive() and first.exit_code == 0
    second = Worker(app, WorkerConfig(concurrency=2, schedules=False, burst=True))
    assert second.run() == 0
    done = app.get(held.id)
    assert done.state == JobState.SUCCEEDED and done.attempts == 1
    assert done.last_worker == second.config.name
    assert app.stats()["default"]["succeeded"] == WARM_UP + 1 + 4


@pytest.mark.parametrize("store_url", ["sqlite", "redis"], indirect=True)
def test_a_job_leased_ahead_keeps_its_lease_and_its_timeout_counts_from_its_start(store_url):
    """Lease 1 s; the job leased ahead waits 2.5 s (over two leases) behind a long one,
    then runs 0.3 s of its 1 s timeout: one attempt, succeeded, the worker exits cleanly."""
    app = deferq.App(store_url, lease=1)
    running, release = threading.Event(), threading.Event()

    @app.task()
    def hold() -> None:
        running.set()
        release.wait(20)

    @app.task(timeout=1.0)
    def timed() -> str:
        time.sleep(0.3)
        return "in time"

    try:
        blocker, after = short_jobs_then(app, hold.enqueue, timed.enqueue)
        worker = Worker(app, WorkerConfig(concurrency=1, schedules=False, burst=True))
        thread = start(worker)
        assert running.wait(15)
        held = held_behind(app, worker, after)
        time.sleep(2.5)
        waiting = app.get(held.id)
        assert waiting.state == JobState.ACTIVE and waiting.worker == worker.config.name  # renewed
        release.set()
        thread.join(30)
        assert not thread.is_alive() and worker.exit_code == 0  # no timeout overran
        for job in [held, *after]:
            done = app.get(job.id)
            assert done.state == JobState.SUCCEEDED and done.attempts == 1, done
    finally:
        release.set()
        app.close()


@pytest.mark.parametrize("store_url", ["sqlite", "redis"], indirect=True)
def test_a_job_leased_ahead_and_cancelled_before_its_start_never_runs(store_url):
    app = deferq.App(store_url, lease=1)
    running, release = threading.Event(), threading.Event()
    ran: list[int] = []

    @app.task()
    def hold() -> None:
        running.set()
        release.wait(20)

    @app.task()
    def counted(i: int) -> None:
        ran.append(i)

    try:
        calls = iter(range(100))
        blocker, after = short_jobs_then(app, hold.enqueue, lambda: counted.enqueue(next(calls)))
        worker = Worker(app, WorkerConfig(concurrency=1, schedules=False, burst=True))
        thread = start(worker)
        assert running.wait(15)
        held = held_behind(app, worker, after)
        assert app.cancel(held.id)
        until(lambda: app.get(held.id).state == JobState.CANCELLED)  # at the next heartbeat, still held
        assert app.get(blocker.id).state == JobState.ACTIVE
        release.set()
        thread.join(30)
        assert not thread.is_alive() and worker.exit_code == 0
        assert held.args[0] not in ran and len(ran) == len(after) - 1
    finally:
        release.set()
        app.close()


@pytest.mark.parametrize(("trip", "job", "leased_ahead"), [
    (0.001, 0.00001, 8),  # jobs 100x shorter than a round trip: as many as allowed
    (0.001, 0.0005, 8),   # two per slot per round trip
    (0.001, 0.004, 2),    # 8 slots finish two jobs during one round trip
    (0.001, 0.02, 0),     # longer than a round trip: none, another worker may run them
])
def test_the_worker_leases_ahead_what_its_slots_finish_in_one_round_trip(trip, job, leased_ahead):
    app = deferq.App("memory://")
    worker = Worker(app, WorkerConfig(concurrency=8, schedules=False))
    for _ in range(40):  # the moving averages settle on steady figures
        MEASURE(worker, trip, [job, job, None])  # None: a job settled that was no longer this worker's
    assert worker.ahead == leased_ahead
    app.close()


class SlowInputs(Middleware):
    """An after_claim hook that takes 2.5 s (over two leases of 1 s), as a chord callback
    reading a thousand results from a loaded store may: the lease it finds when it ends."""

    def __init__(self, app: deferq.App) -> None:
        self.app = app
        self.lease_left: list[float] = []

    def after_claim(self, jobs: list[Job]) -> list[Job]:
        time.sleep(2.5)  # the hook's own work, longer than the lease
        stored = self.app.get(jobs[0].id)
        self.lease_left.append((stored.lease_until or 0) - time.time())
        return jobs


@pytest.mark.parametrize("store_url", ["sqlite", "redis", "postgres", "mysql"], indirect=True)
def test_a_job_keeps_its_lease_while_its_after_claim_hooks_outlast_it(store_url):
    app = deferq.App(store_url, lease=1)
    slow = SlowInputs(app)
    app.add_middleware(slow)

    @app.task()
    def once() -> str:
        return "ran"

    try:
        job = once.enqueue()
        worker = Worker(app, WorkerConfig(concurrency=1, schedules=False, burst=True))
        assert worker.run() == 0
        assert slow.lease_left and slow.lease_left[0] > 0  # renewed while the hook ran
        done = app.get(job.id)
        assert done.state == JobState.SUCCEEDED and done.attempts == 1 and done.result == "ran"
    finally:
        app.close()
