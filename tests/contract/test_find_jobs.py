"""Listing and searching jobs (backends/search.py) on every store: keyset pages that
walk every match once, filters by state, queue and task, text in arguments and errors,
and a scan that says it stopped at its window."""

from __future__ import annotations

import uuid

import pytest

import deferq
from deferq.backends.base import Outcome
from deferq.backends.search import JobQuery
from deferq.job import JobState


def fresh_queue() -> str:
    return f"find-{uuid.uuid4().hex[:8]}"  # stores are shared by a session's tests


def walk(backend, **query):
    """Every page of a query: (the jobs, page by page, the last page)."""
    pages, cursor = [], None
    while True:
        page = backend.find_jobs(JobQuery(cursor=cursor, **query))
        pages.append(page.jobs)
        cursor = page.cursor
        if cursor is None or len(pages) > 50:
            return pages, page


def test_pages_walk_every_job_once(app, backend):
    queue = fresh_queue()
    ids = [app.enqueue("find.walk", [i], queue=queue).id for i in range(23)]
    pages, _ = walk(backend, queue=queue, limit=10)
    seen = [job.id for page in pages for job in page]
    assert [len(page) for page in pages][:3] == [10, 10, 3]
    assert sorted(seen) == sorted(ids) and len(seen) == len(set(seen))
    assert backend.find_jobs(JobQuery(queue=fresh_queue())).jobs == []


def test_jobs_stored_at_one_instant_are_each_listed_once(app, backend):
    """A batch lands at one instant: equal due times across priorities (Redis: sorted sets
    of their own), each job listed once however the pages fall."""
    queue = fresh_queue()
    task = app.task(name="find.tie", queue=queue)(lambda n: None)
    jobs = app.enqueue_many([task.options(priority=("high", "normal", "low")[n % 3]).call(n) for n in range(17)])
    pages, _ = walk(backend, queue=queue, limit=4)
    seen = [job.id for page in pages for job in page]
    assert sorted(seen) == sorted(job.id for job in jobs) and len(seen) == len(set(seen))


def test_filters_by_state_and_task(app, backend):
    queue = fresh_queue()
    app.enqueue("find.a", [1], queue=queue)
    app.enqueue("find.b", [2], queue=queue)
    later = app.enqueue("find.a", [3], queue=queue, delay=3600)
    job = backend.reserve([queue], 1, "w", 30, (0, 1, 2))[0]
    backend.settle([Outcome(job, "dead", error="boom")])
    by_state = {state: [j.id for j in backend.find_jobs(JobQuery(state=state, queue=queue)).jobs]
                for state in (JobState.DEAD, JobState.QUEUED, JobState.SCHEDULED, JobState.ACTIVE)}
    assert by_state[JobState.DEAD] == [job.id] and by_state[JobState.SCHEDULED] == [later.id]
    assert len(by_state[JobState.QUEUED]) == 1 and by_state[JobState.ACTIVE] == []
    tasks = [j.task for j in backend.find_jobs(JobQuery(queue=queue, task="find.a")).jobs]
    assert tasks == ["find.a", "find.a"]
    scheduled = backend.find_jobs(JobQuery(queue=queue, task="find.a", state=JobState.SCHEDULED))
    assert [j.id for j in scheduled.jobs] == [later.id]


@pytest.mark.parametrize("window", [5, 10_000])
def test_a_task_filter_walks_every_match_once(app, backend, window, monkeypatch):
    """However small the window, following the cursors lists each of the task's jobs once,
    over states, priorities, due times and ties (Redis decides the task inside page.lua,
    here in rounds of a few jobs: its merge of the sets is what is tested)."""
    monkeypatch.setattr("deferq.backends.redis.search.FIRST_LOOK", 2)
    queue = fresh_queue()
    mine = []
    for i in range(30):
        job = app.enqueue("find.mine" if i % 3 == 0 else "find.other", [i], queue=queue,
                          priority=("high", "normal", "low")[i % 2], delay=3600 if i % 4 == 0 else 0)
        if job.task == "find.mine":
            mine.append(job.id)
    options = [deferq.options.JobOptions.parse(queue=queue, priority=level) for level in ("high", "low")]
    tied = app.enqueue_many([deferq.task.Call("find.mine" if n % 2 else "find.other", (n,), {}, options[n % 3 % 2])
                             for n in range(20)])
    mine += [job.id for job in tied if job.task == "find.mine"]
    for job in backend.reserve([queue], 6, "w", 30, (0, 1, 2)):
        backend.settle([Outcome(job, "succeeded")])
    pages, last = walk(backend, queue=queue, task="find.mine", limit=3, window=window)
    seen = [job.id for page in pages for job in page]
    assert sorted(seen) == sorted(mine) and len(seen) == len(set(seen))
    assert all(len(page) <= 3 for page in pages) and last.cursor is None


def test_text_in_arguments_and_errors(app, backend):
    queue = fresh_queue()
    wanted = app.enqueue("find.text", ["hello Zebra42 world"], queue=queue)
    app.enqueue("find.text", ["nothing here"], queue=queue)
    failing = app.enqueue("find.text", ["x"], queue=queue, delay=0)
    for job in backend.reserve([queue], 3, "w", 30, (0, 1, 2)):
        error = "GatewayError: card declined" if job.id == failing.id else None
        backend.settle([Outcome(job, "dead" if error else "succeeded", error=error)])
    page = backend.find_jobs(JobQuery(queue=queue, text="zebra42"))
    assert [j.id for j in page.jobs] == [wanted.id] and page.text_search in ("index", "words", "scan")
    assert [j.id for j in backend.find_jobs(JobQuery(queue=queue, text="declined")).jobs] == [failing.id]
    assert backend.find_jobs(JobQuery(queue=queue, text="giraffe")).jobs == []


def test_a_scan_says_where_it_stopped(app, backend):
    queue = fresh_queue()
    for i in range(12):
        app.enqueue("find.scan", [f"item {i}"], queue=queue)
    page = backend.find_jobs(JobQuery(queue=queue, text="nomatch", window=5))
    assert page.jobs == []
    if page.text_search == "scan":  # a store may scan more than asked (memory: all), never less unsaid
        assert page.complete is (page.scanned >= 12)


def test_a_cursor_from_elsewhere_is_refused(backend):
    with pytest.raises(ValueError, match="cursor"):
        backend.find_jobs(JobQuery(cursor="not-a-cursor!"))


def test_jobs_are_found_by_tag_whole_and_exact(app, backend):
    queue = fresh_queue()
    task = app.task(name="find.tagged", queue=queue, tags=["import"])(lambda n: None)
    seven = [task.options(tags=["tenant:7", "import"]).enqueue(n).id for n in range(5)]
    task.options(tags=["tenant:70"]).enqueue(9)  # a longer tag is another tag
    task.options(tags=["Tenant:7"]).enqueue(10)  # so is one in other case
    plain = task.enqueue(11).id
    pages, last = walk(backend, queue=queue, tag="tenant:7", limit=2)
    assert [job.id for page in pages for job in page] == seven[::-1] and last.complete
    assert [job.id for job in backend.find_jobs(JobQuery(tag="import", queue=queue, limit=10)).jobs] == [
        plain, *seven[::-1]]
    assert backend.find_jobs(JobQuery(tag="tenant:7", task="find.other")).jobs == []
    job = backend.reserve([queue], 1, "w", 30, (0, 1, 2))[0]  # the oldest: seven[0]
    backend.settle([Outcome(job, "succeeded")])
    found = backend.find_jobs(JobQuery(tag="tenant:7", state=JobState.SUCCEEDED, queue=queue)).jobs
    assert [j.id for j in found] == [seven[0]]
    assert backend.find_jobs(JobQuery(tag="tenant:7", task="find.tagged", queue=queue)).jobs[0].id == seven[-1]
