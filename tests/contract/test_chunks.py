"""Chunk tasks (deferq.chunks) on every store: jobs enqueued one by one reach the function
in calls of at most `size`, each once; ChunkFailed fails the named jobs alone; any other
exception fails the call's jobs; each job keeps its result, attempts and state; a fair
queue's keys share a chunk; a limit counts items; a cancel acts on one job."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

import deferq
from deferq.job import JobState
from deferq.observe import attempts
from deferq.worker import Worker, WorkerConfig

pytestmark = pytest.mark.timeout(120)


class Calls:
    """What a chunk task's function was called with, call by call."""

    def __init__(self) -> None:
        self.lists: list[list[object]] = []
        self.lock = threading.Lock()

    def add(self, items: list[object]) -> None:
        with self.lock:
            self.lists.append(list(items))

    def items(self) -> list[object]:
        return [item for call in self.lists for item in call]


def burst(app: deferq.App, queue: str, concurrency: int = 4) -> int:
    return Worker(app, WorkerConfig(queues=(queue,), burst=True, concurrency=concurrency, schedules=False)).run()


def run_until_done(app: deferq.App, queue: str, jobs: list[deferq.Job], concurrency: int = 1) -> Worker:
    """A worker runs until every one of `jobs` ended (their retries and snoozes too)."""
    worker = Worker(app, WorkerConfig(queues=(queue,), concurrency=concurrency, schedules=False, idle_wait=0.1))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        until(lambda: all(job and job.state.finished for job in app.backend.get_many([j.id for j in jobs])), 60)
    finally:
        worker.stop()
        thread.join(30)
    return worker


def until(check: Callable[[], object], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def test_a_thousand_items_enqueued_one_by_one_reach_the_function_in_calls_of_at_most_size_each_once(app):
    calls = Calls()

    @app.task(chunk=deferq.Chunk(size=100, wait=0.2), queue="chunks")
    def index(ids: list[int]) -> None:
        calls.add(ids)

    jobs = [index.enqueue(i) for i in range(1000)]
    assert burst(app, "chunks") == 0
    assert sorted(calls.items()) == list(range(1000))  # each item once
    assert max(len(call) for call in calls.lists) <= 100
    assert len(calls.lists) <= 20  # gathered: not a call per job
    finished = app.backend.get_many([job.id for job in jobs])
    assert {(job.state, job.attempts) for job in finished if job} == {(JobState.SUCCEEDED, 1)}


def test_items_failed_through_chunk_failed_retry_alone_and_the_others_run_once(app):
    calls = Calls()
    failing, seen = {3, 14, 15, 41}, set()

    @app.task(chunk=deferq.Chunk(size=10, wait=0.05), queue="chunks", backoff=lambda attempt: 0.0)
    def index(ids: list[int]) -> list[str]:
        calls.add(ids)
        failed = {at: ValueError(f"item {item}") for at, item in enumerate(ids) if item in failing - seen}
        seen.update(ids)  # each failing item fails at its first call only
        if failed:
            raise deferq.ChunkFailed(failed, results=[f"done {item}" for item in ids])
        return [f"done {item}" for item in ids]

    jobs = [index.enqueue(i) for i in range(50)]
    assert burst(app, "chunks") == 0
    seen = calls.items()
    assert sorted(set(seen)) == list(range(50))
    assert {item: seen.count(item) for item in range(50) if seen.count(item) != 1} == dict.fromkeys(failing, 2)
    for i, job in enumerate(jobs):
        done = app.get(job.id)
        assert done is not None and done.state == JobState.SUCCEEDED
        assert done.attempts == (2 if i in failing else 1)
        assert done.result == f"done {i}"


def test_an_exception_fails_every_job_of_the_call_and_each_retries_or_dies_on_its_own(app):
    calls = Calls()

    @app.task(chunk=deferq.Chunk(size=6, wait=0.05), queue="chunks", backoff=lambda a: 0.0)
    def index(ids: list[int]) -> None:
        calls.add(ids)
        if len(calls.lists) == 1:
            raise RuntimeError("the search engine said no")

    jobs = [index.enqueue(i) for i in range(5)]
    once = index.options(max_attempts=1).enqueue(5)
    assert burst(app, "chunks") == 0
    assert calls.lists[0] == [0, 1, 2, 3, 4, 5] and sorted(calls.items()[6:]) == [0, 1, 2, 3, 4]
    for job in jobs:  # failed in the first call, then succeeded
        done = app.get(job.id)
        assert done is not None and (done.state, done.attempts) == (JobState.SUCCEEDED, 2)
    dead = app.get(once.id)  # its own max_attempts
    assert dead is not None and dead.state == JobState.DEAD and "the search engine said no" in (dead.error or "")


def test_a_chunk_not_full_is_called_once_its_first_job_waited(app):
    calls = Calls()

    @app.task(chunk=deferq.Chunk(size=100, wait=0.3), queue="chunks")
    def index(ids: list[str]) -> list[str]:
        calls.add(ids)
        return [item.upper() for item in ids]

    jobs = [index.enqueue(text) for text in ("a", "b", "c")]
    started = time.monotonic()
    assert burst(app, "chunks") == 0
    assert calls.lists == [["a", "b", "c"]]
    assert time.monotonic() - started >= 0.3
    assert [app.get(job.id).result for job in jobs] == ["A", "B", "C"]


def test_a_fair_queues_keys_share_a_chunk(app):
    calls = Calls()

    @app.task(chunk=deferq.Chunk(size=20, wait=0.05), queue="fair")
    def index(ids: list[str]) -> None:
        calls.add(ids)

    for i in range(60):
        index.options(fair_key="tenant:a").enqueue(f"a{i}")
    for tenant in "bc":
        for i in range(5):
            index.options(fair_key=f"tenant:{tenant}").enqueue(f"{tenant}{i}")
    assert burst(app, "fair", concurrency=1) == 0
    first = calls.lists[0]  # a takes its turns with b and c: it does not fill the call (on a store of
    # several servers, each server's claim takes its own turns: most of b's and c's jobs)
    assert all(sum(item.startswith(tenant) for item in first) >= 4 for tenant in "bc")
    small = [f"{t}{i}" for t in "bc" for i in range(5)]
    assert sorted(calls.items()) == sorted([f"a{i}" for i in range(60)] + small)


def test_a_concurrency_limit_counts_items_not_calls(app):
    calls = Calls()

    @app.task(chunk=deferq.Chunk(size=20, wait=0.05), queue="chunks", concurrency=3)
    def index(ids: list[int]) -> None:
        calls.add(ids)

    jobs = [index.enqueue(i) for i in range(12)]
    run_until_done(app, "chunks", jobs)
    assert sorted(calls.items()) == list(range(12))
    assert max(len(call) for call in calls.lists) <= 3


def test_a_job_cancelled_while_its_chunk_gathers_is_left_out_of_the_call(app):
    calls = Calls()

    @app.task(chunk=deferq.Chunk(size=100, wait=0.5), queue="chunks")
    def index(ids: list[int]) -> None:
        calls.add(ids)

    jobs = [index.enqueue(i) for i in range(3)]
    worker = Worker(app, WorkerConfig(queues=("chunks",), burst=True, schedules=False))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    until(lambda: all(app.get(job.id).state == JobState.ACTIVE for job in jobs))
    assert app.cancel(jobs[1].id)
    thread.join(30)
    assert not thread.is_alive()
    assert calls.lists == [[0, 2]]
    assert [app.get(job.id).state for job in jobs] == [JobState.SUCCEEDED, JobState.CANCELLED, JobState.SUCCEEDED]


def test_plain_jobs_and_a_chunk_tasks_jobs_share_a_queue(app):
    calls, plain = Calls(), Calls()

    @app.task(chunk=deferq.Chunk(size=30, wait=0.05), queue="mixed")
    def index(ids: list[int]) -> None:
        calls.add(ids)

    @app.task(queue="mixed")
    def single(i: int) -> None:
        plain.add([i])

    app.enqueue_many([c for i in range(150) for c in (index.call(i), single.call(i))])
    worker = Worker(app, WorkerConfig(queues=("mixed",), burst=True, concurrency=2, schedules=False))
    assert worker.run() == 0
    assert sorted(calls.items()) == list(range(150)) and sorted(plain.items()) == list(range(150))
    assert max(len(call) for call in calls.lists) <= 30
    assert (worker.chunk_leases, worker.gather.count, len(worker.running)) == (0, 0, 0)


def test_an_async_chunk_task_runs_its_calls_on_the_event_loop_and_a_timeout_fails_the_call(app):
    calls = Calls()

    @app.task(chunk=deferq.Chunk(size=10, wait=0.05), queue="chunks", timeout=0.5, max_attempts=1)
    async def fetch(ids: list[int]) -> list[int]:
        calls.add(ids)
        if 99 in ids:
            await asyncio.sleep(5)  # past the timeout: every job of the call fails
        await asyncio.sleep(0.01)
        return [i + 1 for i in ids]

    jobs = [fetch.enqueue(i) for i in range(25)]
    assert burst(app, "chunks") == 0
    assert sorted(calls.items()) == list(range(25)) and max(len(call) for call in calls.lists) <= 10
    assert [app.get(job.id).result for job in jobs] == [i + 1 for i in range(25)]
    slow = [fetch.enqueue(99), fetch.enqueue(98)]
    assert burst(app, "chunks") == 0
    for job in slow:
        done = app.get(job.id)
        assert done is not None and done.state == JobState.DEAD and "timed out" in (done.error or "")


def test_a_job_that_expires_while_its_chunk_gathers_is_left_out_and_ends_expired(app):
    calls = Calls()

    @app.task(chunk=deferq.Chunk(size=100, wait=1.5), queue="chunks")
    def index(ids: list[int]) -> None:
        calls.add(ids)

    keep = index.enqueue(1)
    short = index.options(expires=0.5).enqueue(2)  # claimed at once, then expires as the chunk gathers
    assert burst(app, "chunks") == 0
    assert calls.lists == [[1]]
    assert app.get(keep.id).state == JobState.SUCCEEDED
    ended = app.get(short.id)
    assert ended is not None and (ended.state, ended.error) == (JobState.CANCELLED, "expired")


def test_a_rate_counts_items_not_calls(app):
    calls, at = Calls(), []

    @app.task(chunk=deferq.Chunk(size=100, wait=2.0), queue="chunks", rate="20/s")
    def index(ids: list[int]) -> None:
        calls.add(ids)
        at.append(time.monotonic())

    turns, take = [], app.backend.rate_take
    app.backend.rate_take = lambda *a: turns.append(a) or take(*a)  # counted on the real store
    jobs = [index.enqueue(i) for i in range(40)]
    started = time.monotonic()
    worker = run_until_done(app, "chunks", jobs)
    assert sorted(calls.items()) == list(range(40))
    # a turn each, kept when its item comes back: waiting up to Chunk.wait (2 s, longer than
    # the rate's period: the reserved turn must outlive it) for the call does
    # not make it late (a new turn each time pushed every later item back, again and again)
    assert len(turns) <= 80  # (92 to 132 on a quiet machine when it did, hundreds under load)
    assert (worker.chunk_leases, worker.gather.count, len(worker.running)) == (0, 0, 0)  # snoozed, leased again
    assert len(calls.lists) >= 2  # one call cannot take 40 items at 20 a second
    assert at[-1] - started >= 1.0  # 40 items at 20 a second: the last ones wait about 2 s


def test_jobs_gathered_before_their_queue_is_paused_go_back_un_run_and_run_once_it_resumes(app):
    calls = Calls()

    @app.task(chunk=deferq.Chunk(size=100, wait=0.5), queue="chunks")
    def index(ids: list[int]) -> None:
        calls.add(ids)

    jobs = [index.enqueue(i) for i in range(3)]
    worker = Worker(app, WorkerConfig(queues=("chunks",), burst=True, schedules=False, idle_wait=0.1))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    until(lambda: all(app.get(job.id).state == JobState.ACTIVE for job in jobs))  # gathered, not called
    assert app.backend.pause("chunks")
    thread.join(30)
    assert not thread.is_alive() and calls.lists == []
    assert {(job.state, job.attempts) for job in app.backend.get_many([j.id for j in jobs])} == {
        (JobState.QUEUED, 0)}  # given back un-run: no attempt spent
    assert app.backend.resume("chunks")
    assert burst(app, "chunks") == 0
    assert calls.lists == [[0, 1, 2]]


def test_an_async_chunk_tasks_jobs_gathered_before_a_pause_go_back_un_run(app):
    calls = Calls()

    @app.task(chunk=deferq.Chunk(size=100, wait=0.3), queue="chunks")
    async def fetch(ids: list[int]) -> None:
        calls.add(ids)

    jobs = [fetch.enqueue(i) for i in range(2)]
    worker = Worker(app, WorkerConfig(queues=("chunks",), burst=True, schedules=False, idle_wait=0.1))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    until(lambda: all(app.get(job.id).state == JobState.ACTIVE for job in jobs))
    assert app.backend.pause("chunks")
    thread.join(30)
    assert not thread.is_alive() and calls.lists == []
    assert {(job.state, job.attempts) for job in app.backend.get_many([j.id for j in jobs])} == {
        (JobState.QUEUED, 0)}
    assert (worker.chunk_leases, worker.gather.count, len(worker.running), worker.busy) == (0, 0, 0, 0)


def test_each_job_names_the_call_that_last_ran_it_and_a_calls_jobs_are_found_by_it(app):
    """Job.chunk_call: one fresh id per call, set by the call's settle; a job retried in a
    later call names that call; `find_jobs(chunk=...)` lists a call's jobs; plain jobs
    have none."""
    calls = Calls()

    @app.task(chunk=deferq.Chunk(size=4, wait=0), queue="chunks", backoff=lambda attempt: 0.0)
    def index(ids: list[int]) -> None:
        calls.add(ids)
        if len(calls.lists) == 1:
            raise deferq.ChunkFailed({0: "try again"})

    @app.task(queue="plain")
    def plain() -> None:
        pass

    jobs = app.enqueue_many([index.call(i) for i in range(4)])
    alone = plain.enqueue()
    assert burst(app, "chunks", concurrency=1) == 0 and burst(app, "plain") == 0
    assert calls.lists[0] == [0, 1, 2, 3] and calls.lists[1] == [0]  # item 0 failed, then ran alone
    done = {job.id: app.get(job.id) for job in jobs}
    first, retried = {done[j.id].chunk_call for j in jobs[1:]}, done[jobs[0].id].chunk_call
    assert len(first) == 1 and None not in first and retried is not None and retried not in first
    assert app.get(alone.id).chunk_call is None
    (call,) = first
    page = app.find_jobs(chunk=call)
    assert sorted(job.id for job in page.jobs) == sorted(j.id for j in jobs[1:])
    assert [job.id for job in app.find_jobs(chunk=retried).jobs] == [jobs[0].id]
    assert [job.id for job in app.find_jobs(chunk=call, state="succeeded", limit=2).jobs] == \
        [j.id for j in reversed(jobs[2:])]  # newest first, a page at a time
    assert app.find_jobs(chunk=call, task="chunks.other").jobs == []
    assert app.find_jobs(chunk="no-such-call").jobs == []
    logged = [(a["outcome"], a.get("chunk_call")) for a in attempts.read(app.backend, jobs[0].id)]
    assert logged == [("retry", call), ("succeeded", retried)]  # the attempt log keeps each attempt's call


def test_a_chunk_of_a_hundred_is_claimed_in_at_most_two_round_trips_and_settled_in_at_most_two(app):
    """Naming the call costs no round trip: its id goes with the outcomes of the call's
    settle. Counted at the store: the claims that brought jobs, and the settles (a
    settle that carries the next claim counts as one of each)."""
    claims: list[int] = []
    settles: list[int] = []
    inside = threading.local()
    backend = app.backend

    def counting(name: str, note: Callable[[tuple, object], None]) -> None:
        method = getattr(backend, name)

        def call(*args, **kwargs):
            outer = not getattr(inside, "busy", False)
            inside.busy = True
            try:
                answer = method(*args, **kwargs)
            finally:
                inside.busy = not outer
            if outer:
                note(args, answer)
            return answer

        setattr(backend, name, call)

    def claimed(jobs: object) -> None:
        if jobs:
            claims.append(len(jobs))  # type: ignore[arg-type]

    for name in ("reserve", "wait_and_reserve"):
        if hasattr(backend, name):
            counting(name, lambda args, jobs: claimed(jobs))
    for name in ("settle", "settle_each"):
        counting(name, lambda args, applied: settles.append(len(args[0])))
    counting("settle_and_reserve", lambda args, answer: (settles.append(len(args[0])), claimed(answer[1])))

    @app.task(chunk=deferq.Chunk(size=100, wait=30), queue="chunks")
    def index(ids: list[int]) -> None:
        pass

    jobs = app.enqueue_many([index.call(i) for i in range(100)])
    assert burst(app, "chunks", concurrency=1) == 0
    assert sum(claims) == 100 and len(claims) <= 2, claims
    assert sum(settles) == 100 and len(settles) <= 2, settles
    assert len({job.chunk_call for job in app.backend.get_many([job.id for job in jobs])}) == 1
