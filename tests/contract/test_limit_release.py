"""What a limit's clear, resume or new rate does to the jobs it already holds, on every
store: they are given back at once (due now), in batches each one atomic step of the
store, and the limits that still hold are asked again when they come back.

Backlogs of hundreds are held as a worker holds them: each leased job passes the App's
own `Limits` middleware, and its snooze is settled (settle_held). The backlogs of
thousands are held as that middleware leaves them, but in batches (hold_backlog): the
middleware's few store calls a job would take a minute on a loaded PostgreSQL."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from deferq.attempt.runner import decide_failure
from deferq.backends.base import Outcome, OutcomeKind
from deferq.errors import Snooze
from deferq.job import JobState
from deferq.limits import Limits
from tests.contract.test_worker import start_worker, stop_worker, wait_for_state

BACKLOG = 3000  # more than a few of the store's batches (HOLD_BATCH)
PRIORITIES = (0, 1, 2)


def limits_of(app) -> Limits:
    return next(m for m in app.registry.chain.middleware if isinstance(m, Limits))


def settle_held(app, queue: str = "default") -> int:
    """Lease every due job of `queue` and pass each through the App's Limits middleware,
    as a worker does; settle the snoozes it raises. A job it lets run, or one back on its
    turn (come while the backlog was held), is settled as succeeded. Returns how many it
    held."""
    backend, limits, seen = app.backend, limits_of(app), set()
    while jobs := backend.reserve([queue], 500, "w-held", 60, PRIORITIES):
        outcomes = []
        for job in jobs:
            try:
                if job.id not in seen:
                    seen.add(job.id)
                    limits.before_run(job)
                outcomes.append(Outcome(job, OutcomeKind.SUCCEEDED))
            except Snooze as exc:
                outcomes.append(decide_failure(app.registry.spec_for(job), job, exc))
        assert all(backend.settle(outcomes))
    return counts(app, queue)["scheduled"]


def hold_backlog(app, names: tuple[str, ...], interval: float, count: int, first: float = 0.0) -> None:
    """Lease `count` jobs and hold each, as the Limits middleware does, until a turn
    `interval` seconds after the one before (the first `first` seconds from now, else a
    turn): noted under `names`, snoozed to that moment, in batches of 500."""
    backend = app.backend
    now = backend.now()
    first = now + (first or interval)
    for start in range(0, count, 500):
        jobs = backend.reserve(["default"], min(500, count - start), "w-held", 60, PRIORITIES)
        held = [(job, first + (start + i) * interval) for i, job in enumerate(jobs)]
        backend.limit_hold(names, held)
        assert all(backend.settle([Outcome(job, OutcomeKind.SNOOZE, delay=due - now, due=due)
                                   for job, due in held]))


def counts(app, queue: str = "default") -> dict[str, int]:
    found = app.backend.stats().get(queue)
    return {state: found.counts[state] for state in ("queued", "scheduled", "active")} if found else {}


def test_a_cleared_rate_gives_its_reserved_turns_back_at_once(app):
    """3,000 jobs held by a rate of 5 a second (turns reserved up to 10 minutes out):
    `clear` makes every one due now, and a fresh lease takes them all."""
    task = app.task(name=f"report-{uuid.uuid4().hex[:6]}")(lambda n: n)
    app.limits.set(task.name, rate="5/s")
    app.enqueue_many([task.call(n) for n in range(BACKLOG)])
    hold_backlog(app, (task.name,), 0.2, BACKLOG)
    assert counts(app)["scheduled"] > BACKLOG - 100  # (the first turns may come while it holds)
    last = max(job.run_at for job in app.backend.list_jobs(JobState.SCHEDULED, limit=1))
    assert last > app.backend.now() + 500  # the 3000th turn: 10 minutes out

    started = time.monotonic()
    assert app.limits.clear(task.name)
    took = time.monotonic() - started
    assert counts(app) == {"queued": BACKLOG, "scheduled": 0, "active": 0}
    taken = 0
    while batch := app.backend.reserve(["default"], 1000, "w-fresh", 60, PRIORITIES):
        taken += len(batch)
    assert taken == BACKLOG
    assert took < 10, f"the clear took {took:.1f}s"


def test_a_resumed_pause_gives_the_jobs_that_met_it_back_at_once(app):
    """3,000 jobs met a 60 s pause; `resume` makes them claimable at once. A job that a
    pause of another name holds, as the middleware holds it, waits on."""
    task = app.task(name=f"sync-{uuid.uuid4().hex[:6]}")(lambda n: n)
    other = app.task(name=f"other-{uuid.uuid4().hex[:6]}", queue="other")(lambda n: n)
    app.limits.pause(task.name, 60)
    app.limits.pause(other.name, 60)
    app.enqueue_many([task.call(n) for n in range(BACKLOG)] + [other.call(0)])
    hold_backlog(app, (task.name,), 0.0, BACKLOG, first=60)
    assert settle_held(app, queue="other") == 1
    assert app.backend.reserve(["default", "other"], 10, "w-fresh", 60, PRIORITIES) == []

    started = time.monotonic()
    assert app.limits.resume(task.name)
    took = time.monotonic() - started
    taken = 0
    while batch := app.backend.reserve(["default", "other"], 1000, "w-fresh", 60, PRIORITIES):
        assert {job.task for job in batch} == {task.name}
        taken += len(batch)
    assert taken == BACKLOG
    assert counts(app, "other")["scheduled"] == 1  # still paused
    assert took < 10, f"the resume took {took:.1f}s"


def test_a_resumed_pause_gives_back_what_the_middleware_held(app):
    """The worker's own path: 50 jobs meet a 60 s pause in the Limits middleware; after
    `resume` they are due now."""
    task = app.task(name=f"ping-{uuid.uuid4().hex[:6]}")(lambda n: n)
    app.limits.pause(task.name, 60)
    app.enqueue_many([task.call(n) for n in range(50)])
    assert settle_held(app) == 50
    assert app.limits.resume(task.name)
    assert counts(app) == {"queued": 50, "scheduled": 0, "active": 0}


def test_a_faster_rate_retimes_the_slower_turns_and_the_same_rate_keeps_them(app):
    """Set again with the same rate (a concurrency added), the jobs keep their turns;
    with a faster one, they take turns at the new rate from now (turns 0.01 s apart:
    the last of 600 within 6 s, not 2 hours)."""
    task = app.task(name=f"digest-{uuid.uuid4().hex[:6]}")(lambda n: n)
    jobs = 600
    app.limits.set(task.name, rate="5/m")
    app.enqueue_many([task.call(n) for n in range(jobs + 1)])
    held = settle_held(app)
    assert held >= jobs - 3  # (a slow store may see a turn 12 s out come)
    app.limits.set(task.name, rate="5/m", concurrency=50)
    assert counts(app)["scheduled"] >= held - 1  # the same turns go on

    app.limits.set(task.name, rate="100/s")
    assert counts(app)["scheduled"] == 0 and counts(app)["queued"] >= held - 1
    limits_of(app).known.next_read = 0.0  # this process reads the new rate now, not within the second
    settle_held(app)  # (on a slow store, their new turns have all come by the time it is done)
    now = app.backend.now()
    latest = max((job.run_at for job in app.backend.list_jobs(JobState.SCHEDULED, limit=jobs)), default=now)
    assert latest - now < jobs / 100 + 1


def test_a_set_rate_starts_afresh_after_a_clear(app):
    """Cleared, then set again: the new rate's first turn is now, not behind the turns
    the first setting handed out."""
    task = app.task(name=f"mail-{uuid.uuid4().hex[:6]}")(lambda n: n)
    app.limits.set(task.name, rate="1/m")
    app.enqueue_many([task.call(n) for n in range(21)])
    assert settle_held(app) == 20
    app.limits.clear(task.name)
    app.limits.set(task.name, rate="1/m")
    limits_of(app).known.next_read = 0.0
    [job] = app.backend.reserve(["default"], 1, "w-fresh", 60, PRIORITIES)
    limits_of(app).before_run(job)  # runs now: no Snooze


@pytest.mark.slow  # workers held over seconds of real time: ~5 s a store
def test_after_a_clear_the_held_jobs_run_at_once_within_the_concurrency_that_still_holds(app):
    """A real worker: 12 jobs held by a rate of 1 every 10 seconds set at run time (two
    minutes of turns); after `clear`, they run as fast as the task's declared concurrency
    of 3 lets them (a job that finds every slot taken asks again a second later), never
    more than 3 at once."""
    running, most, done = [0], [0], []
    lock = threading.Lock()
    name = f"export-{uuid.uuid4().hex[:6]}"

    @app.task(name=name, concurrency=3)
    def export(n: int) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
            done.append(n)

    app.limits.set(name, rate="1/10s")
    jobs = app.enqueue_many([export.call(n) for n in range(12)])
    worker, thread = start_worker(app, concurrency=8)
    try:
        deadline = time.monotonic() + 60
        while (counts(app)["scheduled"] < 10 or counts(app)["queued"] or counts(app)["active"]) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert counts(app)["scheduled"] >= 10  # the first ran on its turn; the rest wait for theirs
        cleared = time.monotonic()
        assert app.limits.clear(name)
        for job in jobs:
            wait_for_state(app, job.id, JobState.SUCCEEDED, timeout=40)
        took = time.monotonic() - cleared
    finally:
        stop_worker(worker, thread)
    assert took < 40, f"the held jobs took {took:.1f}s after the clear (their turns: 120 s)"
    assert most[0] <= 3 and sorted(done) == list(range(12))
