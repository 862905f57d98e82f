"""Redis ready lists (docs/redis.md, "Jobs due at once wait in a list"): plain jobs due at
their creation wait in one list per queue and priority; the claim merges them with the
waiting zsets (jobs stored by the previous release among them) by due time, then
enqueue order; cancelled entries are neither counted nor claimed; listings page through
both."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import deferq
from deferq.backends.base import Enqueue, Outcome, OutcomeKind
from deferq.backends.redis import scripts
from deferq.backends.search import JobQuery
from deferq.job import Job, JobState, new_job_id

# add.lua as the previous release had it: every job in its waiting zset, due at once or not.
PREVIOUS_ADD = """
local now, nows, micros = clock()
local run_s = nows
local settings = ''
local head = string.format('%.0f', micros) .. '\\n'
local tail = '\\n' .. settings .. '\\n'
local records, members = {}, {}
for i = 6, #ARGV, 3 do
  records[#records + 1] = ARGV[i]
  records[#records + 1] = head .. ARGV[i + 1] .. tail .. ARGV[i + 2]
  members[#members + 1] = run_s
  members[#members + 1] = ARGV[i]
end
call_chunked('HSET', KEYS[2], records)
call_chunked('ZADD', KEYS[1], members)
wake(KEYS[3])
return nows
"""


@pytest.fixture
def app(redis_url: str) -> Iterator[deferq.App]:
    app = deferq.App(redis_url)
    yield app
    app.close()


def plain(n: int, priority: int = 1) -> Enqueue:
    return Enqueue(Job(id=new_job_id(), task="t", args=(n,), priority=priority))


def stored_by_previous_release(backend: Any, n: int) -> str:
    """A plain job due at once, as the previous release's add.lua stored it (its zset)."""
    source = scripts._helpers_for(PREVIOUS_ADD) + PREVIOUS_ADD
    qk, job_id = backend.keys.queue("default"), new_job_id()
    args = ("", "", "", "0", "0", job_id, "t", f"[[{n}],{{}}]")
    backend.client.eval(source, 3, qk.waiting[1], qk.new, qk.wake, *args)
    return job_id


def ids(jobs: list[Job]) -> list[str]:
    return [j.id for j in jobs]


def test_jobs_due_at_once_wait_in_the_list_of_their_priority(app: deferq.App) -> None:
    backend: Any = app.backend
    qk = backend.keys.queue("default")
    now = backend.enqueue_many([plain(1), plain(2)])
    high = backend.enqueue_many([plain(3, priority=0)])
    later = app.enqueue("t", [4], delay=60)
    assert backend.client.lrange(qk.ready[1], 0, -1) == [j.id.encode() for j in reversed(now)]
    assert backend.client.lrange(qk.ready[0], 0, -1) == [high[0].id.encode()]
    assert backend.client.zrange(qk.waiting[1], 0, -1) == [later.id.encode()]  # due later: its zset
    assert [backend.get(j.id) for j in now + high] == now + high
    assert backend.stats()["default"].counts["queued"] == 3
    leased = backend.reserve(["default"], 10, "w", 30, (0, 1, 2))
    assert ids(leased) == ids(high + now)
    assert backend.client.exists(*qk.ready) == 0


def test_the_previous_layout_and_the_lists_are_claimed_by_due_time(app: deferq.App) -> None:
    backend: Any = app.backend
    first = stored_by_previous_release(backend, 1)
    [second] = backend.enqueue_many([plain(2)])
    third = stored_by_previous_release(backend, 3)
    fourth, fifth = backend.enqueue_many([plain(4), plain(5)])
    assert backend.get(first).state == JobState.QUEUED
    assert backend.stats()["default"].counts["queued"] == 5
    order = [first, second.id, third, fourth.id, fifth.id]
    assert [j[2] for j in backend.peek(["default"], 10, (0, 1, 2))] == order
    assert ids(backend.reserve(["default"], 2, "w", 30, (0, 1, 2))) == order[:2]
    assert ids(backend.reserve(["default"], 1, "w", 30, (0, 1, 2))) == order[2:3]
    rest = backend.reserve(["default"], 5, "w", 30, (0, 1, 2))
    assert ids(rest) == order[3:]
    assert rest[0].args == (4,) and rest[0].attempts == 1


def test_a_cancelled_job_in_a_list_is_neither_counted_nor_claimed(app: deferq.App) -> None:
    backend: Any = app.backend
    qk = backend.keys.queue("default")
    jobs = backend.enqueue_many([plain(n) for n in range(4)])
    assert backend.cancel(jobs[1].id) and backend.cancel(jobs[3].id)
    assert backend.stats()["default"].counts["queued"] == 2
    assert backend.stats()["default"].counts["cancelled"] == 2
    assert backend.list_jobs(JobState.QUEUED) == [jobs[2], jobs[0]]
    backend.delete(jobs[1].id)  # gone altogether: its entry is dropped too
    assert ids(backend.reserve(["default"], 10, "w", 30, (0, 1, 2))) == [jobs[0].id, jobs[2].id]
    assert backend.client.exists(*qk.ready) == 0
    assert backend.client.hget(qk.gone, "1") is None  # the list emptied: nothing left to subtract
    assert backend.stats()["default"].counts["queued"] == 0


def test_a_job_touched_while_in_a_list_keeps_its_place(app: deferq.App) -> None:
    backend: Any = app.backend
    qk = backend.keys.queue("default")
    jobs = backend.enqueue_many([plain(n) for n in range(3)])
    assert backend.set_remark(jobs[0].id, "looked at")  # it gets its hash, stays in the list
    assert backend.client.hget(qk.new, jobs[0].id) is None
    assert backend.stats()["default"].counts["queued"] == 3
    assert ids(backend.list_jobs(JobState.QUEUED)) == ids(jobs[::-1])
    leased = backend.reserve(["default"], 3, "w", 30, (0, 1, 2))
    assert ids(leased) == ids(jobs)
    assert leased[0].remark == "looked at" and leased[0].attempts == 1
    # Back to waiting (a retry): its zset holds it now; nothing of the list is claimed again
    assert backend.settle([Outcome(leased[0], OutcomeKind.RELEASE)]) == [True]
    assert ids(backend.reserve(["default"], 3, "w", 30, (0, 1, 2))) == [jobs[0].id]


def test_an_add_repeated_after_a_lost_reply_stores_nothing_twice(app: deferq.App) -> None:
    backend: Any = app.backend
    qk = backend.keys.queue("default")
    items = [plain(n) for n in range(3)]
    plan = backend.enqueue_plan(items)
    backend.register_queues(plan.new_queues)
    first = backend._run(plan.calls[0])
    assert backend._run(plan.calls[0]) == first  # the same creation time, nothing written
    assert backend.client.llen(qk.ready[1]) == 3
    backend.reserve(["default"], 1, "w", 30, (0, 1, 2))
    backend._run(plan.calls[0])  # its first job is leased: still the same call
    assert backend.client.llen(qk.ready[1]) == 2


def test_the_jobs_a_batch_returned_keep_their_times_when_its_items_go_in_again(app: deferq.App) -> None:
    backend: Any = app.backend
    items = [plain(n) for n in range(3)]
    first = backend.enqueue_many(items)  # the items' own jobs, stamped with the store's times
    assert all(job.state == JobState.QUEUED and job.created_at > 0 and job.run_at == job.created_at
               for job in first)
    times = [(job.created_at, job.updated_at) for job in first]
    again = backend.enqueue_many(items)  # the same ids: stored once (add.lua), copies returned
    assert [(job.created_at, job.updated_at) for job in first] == times
    assert ids(again) == ids(first) and all(a is not b for a, b in zip(again, first, strict=True))
    assert backend.client.llen(backend.keys.queue("default").ready[1]) == 3


def test_listings_page_through_lists_and_zsets_newest_first(app: deferq.App) -> None:
    backend: Any = app.backend
    keyed = app.enqueue("t", [0], key="k")  # enqueue.lua: its zset
    batches = [backend.enqueue_many([plain(n) for n in range(first, first + 3)]) for first in (1, 4, 7)]
    backend.cancel(batches[1][1].id)
    expected = [keyed.id] + [j.id for batch in batches for j in batch if j.id != batches[1][1].id]
    expected = expected[::-1]  # newest first
    assert ids(backend.list_jobs(JobState.QUEUED, limit=100)) == expected
    assert ids(backend.list_jobs(JobState.QUEUED, limit=3)) == expected[:3]
    for size in (1, 2, 3, 4):
        seen: list[str] = []
        cursor = None
        while True:
            page = backend.find_jobs(JobQuery(state=JobState.QUEUED, limit=size, cursor=cursor))
            seen += ids(page.jobs)
            cursor = page.cursor
            if cursor is None:
                break
        assert seen == expected, size
    page = backend.find_jobs(JobQuery(state=JobState.QUEUED, task="t", limit=4))
    assert ids(page.jobs) == expected[:4]
    assert ids(backend.find_jobs(JobQuery(task="nope", limit=4)).jobs) == []


def test_stats_say_how_long_the_oldest_job_in_a_list_waited(app: deferq.App) -> None:
    backend: Any = app.backend
    [job] = backend.enqueue_many([plain(1)])
    assert 0 <= backend.stats()["default"].oldest_wait <= backend.now() - job.created_at + 1e-3
    assert backend.next_due(["default"]) <= 0
    app.pause("default")
    assert backend.next_due(["default"]) is None
    assert backend.reserve(["default"], 1, "w", 30, (0, 1, 2)) == []
    app.resume("default")
    assert ids(backend.reserve(["default"], 1, "w", 30, (0, 1, 2))) == [job.id]
    assert backend.next_due(["default"]) is None


def test_queues_claimed_together_merge_lists_and_zsets_by_due_time(app: deferq.App) -> None:
    backend: Any = app.backend
    older = stored_by_previous_release(backend, 1)  # in queue default's zset
    [newer] = backend.enqueue_many([Enqueue(Job(id=new_job_id(), task="t", args=(2,), queue="other"))])
    [newest] = backend.enqueue_many([plain(3)])
    backend.cancel(newest.id)
    [last] = backend.enqueue_many([plain(4)])
    assert ids(backend.reserve(["other", "default"], 10, "w", 30, (0, 1, 2))) == [older, newer.id, last.id]
    assert backend.stats()["default"].counts["queued"] == 0


def test_a_batch_of_plain_jobs_of_a_few_queues_is_one_add_a_queue(app: deferq.App) -> None:
    backend: Any = app.backend
    items = [plain(0), Enqueue(Job(id=new_job_id(), task="t", args=(1,), queue="other", priority=0)), plain(2)]
    plan = backend.enqueue_plan(items)
    assert plan.plain and len(plan.calls) == 2
    stored = backend.enqueue_many(items)
    assert [j.args[0] for j in stored] == [0, 1, 2]
    assert [backend.get(j.id) for j in stored] == stored
    assert backend.client.llen(backend.keys.queue("default").ready[1]) == 2
    assert backend.client.llen(backend.keys.queue("other").ready[0]) == 1
    assert [j.args[0] for j in backend.reserve(["default", "other"], 10, "w", 30, (0, 1, 2))] == [1, 0, 2]
    mixed = [plain(3, priority=2), plain(4)]  # one queue, two kinds: one enqueue.lua, all or nothing
    assert not backend.enqueue_plan(mixed).plain


def test_jobs_enqueue_lua_stores_due_at_once_without_a_key_wait_in_the_lists_too(app: deferq.App) -> None:
    backend: Any = app.backend
    qk = backend.keys.queue("default")
    tagged = app.enqueue("t", [0], tags=["a"])  # enqueue.lua: a hash at once
    mixed = backend.enqueue_many([plain(1, priority=2), plain(2)])  # one queue, two kinds: enqueue.lua
    keyed = app.enqueue("t", [3], key="k")  # its zset: a replace may move its due time
    expires = Job(id=new_job_id(), task="t", args=(4,), expires_at=backend.now())  # passed at the claim
    [expiring] = backend.enqueue_many([Enqueue(expires)])
    assert backend.client.lrange(qk.ready[1], 0, -1) == [j.id.encode() for j in (expiring, mixed[1], tagged)]
    assert backend.client.lrange(qk.ready[2], 0, -1) == [mixed[0].id.encode()]
    assert backend.client.zrange(qk.waiting[1], 0, -1) == [keyed.id.encode()]
    assert backend.stats()["default"].counts["queued"] == 5
    plan = backend.enqueue_plan([Enqueue(Job(id=tagged.id, task="t", args=(0,), tags=("a",)))])
    assert backend._run(plan.calls[0])[1:] == [0]  # the same call again: stored already, nothing more
    assert backend.client.llen(qk.ready[1]) == 3
    leased = backend.reserve(["default"], 10, "w", 30, (0, 1, 2))
    assert ids(leased) == [tagged.id, mixed[1].id, keyed.id, mixed[0].id]  # the expired one cancelled
    assert leased[0].tags == ("a",)
    assert backend.get(expiring.id).state == JobState.CANCELLED
