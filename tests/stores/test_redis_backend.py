"""Redis-specific behaviour beyond the shared suite: shards with one server down,
URL forms and bad URLs, blocking waits across servers, workflows (flows.py): a release
left by a killed worker, a child on a server that is down, what plain jobs pay, and
waits woken by the finish."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deferq
from deferq.backends.base import Enqueue, Outcome
from deferq.backends.redis.codec import record_fields
from deferq.errors import ConfigError, StoreUnavailable
from deferq.job import Job, JobState
from tests.support.stores.redis import RedisServer, delete_prefix, unique_prefix


def job(n: int, **fields: object) -> Enqueue:
    from deferq.job import new_job_id

    return Enqueue(Job(id=new_job_id(), task="t", args=(n,), **fields))  # type: ignore[arg-type]


@pytest.fixture
def two_servers(tmp_path: Path):
    servers = [RedisServer(tmp_path / f"s{i}", None, "--appendonly", "yes").start() for i in (0, 1)]
    yield servers
    for server in servers:
        server.stop()


def test_shards_survive_one_server_down(two_servers: list[RedisServer]) -> None:
    a, b = two_servers
    url = f"redis+shards://127.0.0.1:{a.port}/0,127.0.0.1:{b.port}/0?prefix={unique_prefix()}"
    app = deferq.App(url)
    backend = app.backend
    first, second = backend.enqueue_many([job(1)])[0], backend.enqueue_many([job(2)])[0]
    on_a, on_b = (first, second) if backend.shards[0].get(first.id) else (second, first)
    assert backend.shards[0].get(on_a.id) and backend.shards[1].get(on_b.id), "round robin"
    a.stop()
    stored = [backend.enqueue_many([job(n)])[0] for n in range(3, 7)]  # all go to b
    assert all(backend.shards[1].get(j.id) for j in stored)
    taken = backend.reserve(["default"], 10, "w", 30, (1, 0, 2))  # b keeps being drained
    assert {j.id for j in taken} == {on_b.id} | {j.id for j in stored}
    with pytest.raises(StoreUnavailable, match="cannot be reached"):
        backend.get(on_a.id)  # it may be on the missing server: say so, never "no such job"
    with pytest.raises(StoreUnavailable, match="cannot be reached"):
        backend.enqueue_many([_keyed_for(backend, 0)])  # its key belongs to a
    a.start()
    time.sleep(1.1)  # a server that failed is tried again after a second
    assert backend.get(on_a.id).state == JobState.QUEUED
    app.close()


def _keyed_for(backend, shard: int) -> Enqueue:  # type: ignore[no-untyped-def]
    """A job whose unique key hashes to `shard`."""
    n = 0
    while backend._key_shard(f"key{n}") != shard:
        n += 1
    return job(0, key=f"key{n}")


def test_unix_socket_url(tmp_path: Path) -> None:
    sock = tmp_path / "redis.sock"
    server = RedisServer(tmp_path / "unix", None, "--unixsocket", str(sock)).start()
    try:
        app = deferq.App(f"unix://{sock}?db=2&prefix={unique_prefix()}")
        stored = app.enqueue("t", [1])
        assert app.get(stored.id).args == (1,)
        app.close()
    finally:
        server.stop()


@pytest.mark.parametrize(
    "url",
    ["redis://127.0.0.1:6379/1?prefix=a{b}", "redis+cluster://127.0.0.1:notaport", "redis://127.0.0.1:6379/x"],
)
def test_bad_urls_say_what_is_wrong(url: str) -> None:
    with pytest.raises((ConfigError, ValueError)) as raised:
        deferq.App(url).backend
    assert "Traceback" not in str(raised.value)
    assert len(str(raised.value).splitlines()) == 1


def test_down_server_is_one_sentence_and_fast() -> None:
    from tests.support.stores.redis import free_port

    app = deferq.App(f"redis://127.0.0.1:{free_port()}/0")
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match=r"^Redis at 127\.0\.0\.1:\d+ cannot be reached"):
        app.enqueue("t", [1])
    assert time.monotonic() - started < 5


def test_wait_wakes_on_either_shard(two_servers: list[RedisServer]) -> None:
    a, b = two_servers
    url = f"redis+shards://127.0.0.1:{a.port}/0,127.0.0.1:{b.port}/0?prefix={unique_prefix()}"
    app = deferq.App(url)
    backend = app.backend
    for shard in (0, 1):
        backend.wait_for_work(["default"], 0.05)  # consume any token
        backend.wait_for_work(["default"], 0.05)
        timer = threading.Timer(0.2, lambda s=shard: backend.shards[s].enqueue_many([job(s)]))
        timer.start()
        started = time.monotonic()
        backend.wait_for_work(["default"], 5)
        assert 0.15 < time.monotonic() - started < 1, f"not woken by shard {shard}"
        timer.join()
        backend.reserve(["default"], 10, "w", 30, (1, 0, 2))
    app.close()


def _wait_and_reserve(backend, timeout: float):  # type: ignore[no-untyped-def]
    start = time.monotonic()
    jobs = backend.wait_and_reserve(["default"], timeout, 5, "w", 30, (1, 0, 2))
    return jobs, time.monotonic() - start


def test_a_wait_leases_as_it_wakes_even_when_the_server_forgot_the_script(redis_url: str) -> None:
    """reserve.lua rides behind the BLPOP; after SCRIPT FLUSH it answers NOSCRIPT, having
    run nothing, and the job is leased by the script sent again with its source."""
    app = deferq.App(redis_url)
    try:
        _wait_and_reserve(app.backend, 0.05)  # a token left by an earlier test
        app.backend.client.script_flush()
        timer = threading.Timer(0.2, lambda: app.enqueue("t", [1]))
        timer.start()
        jobs, took = _wait_and_reserve(app.backend, 3)
        timer.join()
        assert [(j.args, j.state) for j in jobs] == [((1,), JobState.ACTIVE)] and took < 2.5
    finally:
        app.close()


def test_a_wait_without_leave_to_unblock_ends_by_the_servers_timeout(redis_url: str) -> None:
    """An ACL that forbids CLIENT UNBLOCK (a managed service): the wait still ends, at
    the server's own timeout (up to ~0.1 s later), with no error."""
    user, admin = unique_prefix(), deferq.App(redis_url).backend.client
    admin.acl_setuser(user, enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                      commands=["+@all", "-client|unblock"])
    host, db = redis_url.removeprefix("redis://").rsplit("/", 1)
    prefix = unique_prefix()
    app = deferq.App(f"redis://{user}:pw@{host}/{db.split('?')[0]}?prefix={prefix}")
    try:
        jobs, took = _wait_and_reserve(app.backend, 0.2)
        assert jobs == [] and took < 1.5
        app.enqueue("t", [2])
        assert [j.args for j in _wait_and_reserve(app.backend, 3)[0]] == [(2,)]
    finally:
        app.close()
        delete_prefix(prefix)  # its own prefix: the redis_url fixture deletes only its one
        admin.acl_deluser(user)
        admin.close()


# -- workflows (flows.py) -------------------------------------------------------------


@pytest.fixture
def redis_app(redis_url: str):  # type: ignore[no-untyped-def]
    app = deferq.App(redis_url)
    yield app
    app.close()


def _lease(backend, queue: str = "default"):  # type: ignore[no-untyped-def]
    [leased] = backend.reserve([queue], 1, "w", 30, (0, 1, 2))
    return leased


def test_a_release_left_by_a_killed_worker_is_done_by_the_sweep(redis_app) -> None:  # type: ignore[no-untyped-def]
    """The settle script ran and the worker died before releasing: the parent stays
    marked, and the sweep releases its child once the mark is due (five seconds after
    the settle, moved to now here). Each edge goes once, however often it is replayed."""
    app, backend = redis_app, redis_app.backend
    parent = app.enqueue("t", [1])
    child = app.enqueue("t", [2], after=[parent], queue="other")
    _, calls = backend._settle_calls([Outcome(_lease(backend), "succeeded")])
    assert backend._run(calls[0]) == [3]  # applied, and jobs run after it: the worker would release them
    qk = backend.keys.queue("default")
    backend.recover_expired()
    assert app.get(child.id).state == JobState.BLOCKED  # not due: the settling worker may be at it
    backend.client.zadd(qk.released, {parent.id: 0})
    backend.recover_expired()
    assert app.get(child.id).state == JobState.QUEUED
    assert backend.client.zcard(qk.released) == 0 and not backend.client.exists(qk.children(parent.id))
    leased = _lease(backend, "other")
    backend.client.sadd(qk.children(parent.id), f"other {child.id}")  # replayed: as if never unmarked
    backend.client.zadd(qk.released, {parent.id: 0})
    backend.recover_expired()
    again = app.get(child.id)
    assert (again.state, again.attempts) == (JobState.ACTIVE, leased.attempts)  # moved once only
    assert backend.client.zcard(qk.released) == 0


def test_plain_jobs_carry_nothing_for_workflows_or_waiters(redis_app) -> None:  # type: ignore[no-untyped-def]
    app, backend = redis_app, redis_app.backend
    job_ = app.enqueue("t", [1])
    qk = backend.keys.queue("default")
    _, calls = backend._settle_calls([Outcome(_lease(backend), "succeeded")])
    assert backend._run(calls[0]) == [1]
    assert backend.client.hget(qk.job(job_.id), "notify") is None
    assert not backend.client.exists(qk.done(job_.id), qk.released, qk.children(job_.id))


def test_a_waiter_is_woken_by_the_finish_and_not_by_an_old_token(redis_app) -> None:  # type: ignore[no-untyped-def]
    app, backend = redis_app, redis_app.backend
    job_ = app.enqueue("t", [1], max_attempts=1)
    leased = _lease(backend)
    timer = threading.Timer(0.2, lambda: backend.settle([Outcome(leased, "dead", error="boom")]))
    timer.start()
    started = time.monotonic()
    assert backend.changes(job_.id, 4) is True  # blocked until the finish, not 4 s
    assert time.monotonic() - started < 2
    timer.join()
    qk = backend.keys.queue("default")
    assert 0 < backend.client.ttl(qk.done(job_.id)) <= 60
    assert backend.changes(job_.id, 4) is True  # finished: answered at once
    assert app.retry_dead(job_.id)
    started = time.monotonic()
    assert backend.changes(job_.id, 0.3) is False  # the token of the earlier finish is gone
    assert time.monotonic() - started >= 0.25


def test_a_child_on_a_server_that_is_down_hears_of_its_parent_later(two_servers: list[RedisServer]) -> None:
    """Parent on one shard, child on the other: the parent's settle applies while the
    child's server is down, and the sweep releases the child once it is back."""
    a, b = two_servers
    url = f"redis+shards://127.0.0.1:{a.port}/0,127.0.0.1:{b.port}/0?prefix={unique_prefix()}"
    app = deferq.App(url)
    backend = app.backend
    parent = backend.enqueue_many([_keyed_for(backend, 1)])[0]
    child = backend.enqueue_many([replace(_keyed_for(backend, 0), after=(parent.id,))])[0]
    assert child.state == JobState.BLOCKED and backend.shards[0].get(child.id) is not None
    leased = backend.reserve(["default"], 10, "w", 30, (1, 0, 2))
    assert [j.id for j in leased] == [parent.id]
    a.stop()
    assert backend.settle([Outcome(leased[0], "succeeded")]) == [True]  # applied; the release waits
    a.start()
    assert backend.shards[0].get(child.id).state == JobState.BLOCKED
    marks = backend.shards[1].keys.queue("default").released
    backend.shards[1].client.zadd(marks, {parent.id: 0})  # due for the sweep
    backend.shards[1].recover_expired()
    assert app.get(child.id).state == JobState.QUEUED
    app.close()


def test_a_parent_whose_children_have_not_heard_is_neither_purged_nor_lost(redis_app) -> None:  # type: ignore[no-untyped-def]
    """A parent gone from the store counts as cancelled: purging or deleting a successful
    parent before its children heard would cancel them. Purge keeps it; delete releases
    them first."""
    app, backend = redis_app, redis_app.backend
    first, second = app.enqueue("t", [1]), app.enqueue("t", [2])
    child = app.enqueue("t", [3], after=[first, second])
    for _ in range(2):  # both settle scripts run, their workers "die" before releasing
        _, calls = backend._settle_calls([Outcome(_lease(backend), "succeeded")])
        assert backend._run(calls[0]) == [3]
    assert backend.purge([JobState.SUCCEEDED]) == 0
    assert backend.delete(first.id) is True  # its child heard first
    assert app.get(child.id).state == JobState.BLOCKED  # still waiting for `second`
    backend.client.zadd(backend.keys.queue("default").released, {second.id: 0})
    backend.recover_expired()
    assert app.get(child.id).state == JobState.QUEUED
    assert backend.purge([JobState.SUCCEEDED]) == 1  # `second`, now that its child heard


def test_children_a_producer_stored_but_never_linked_are_linked_by_the_sweep(redis_app) -> None:  # type: ignore[no-untyped-def]
    """On a Cluster or shards the stores and links of one call are separate scripts: a
    producer that dies in between leaves its children in `linking`, and the sweep links
    them (a parent finished meanwhile releases its child; one never stored cancels it)."""
    app, backend = redis_app, redis_app.backend
    running, done = app.enqueue("t", [1]), app.enqueue("t", [2])
    leased = _lease(backend)
    assert backend.settle([Outcome(_lease(backend), "succeeded")]) == [True]  # `done` has finished
    items = [replace(job(n, queue="other"), after=(parent,)) for n, parent in
             ((3, running.id), (4, done.id), (5, "01NEVERSTORED0000000000000"))]
    plan = backend.enqueue_plan(items)
    backend.register_queues(plan.new_queues)
    backend.run_calls(plan.calls)  # stored, blocked; the producer dies here
    waits, released, orphan = (item.job.id for item in items)
    qk = backend.keys.queue("other")
    assert {m.decode() for m in backend.client.zrange(qk.linking, 0, -1)} == {waits, released, orphan}
    backend.recover_expired()
    assert app.get(released).state == JobState.BLOCKED  # within the producer's grace: left alone
    backend.client.zadd(qk.linking, {waits: 0, released: 0, orphan: 0})
    backend.recover_expired()
    assert backend.client.zcard(qk.linking) == 0
    assert app.get(released).state == JobState.QUEUED
    assert app.get(orphan).state == JobState.CANCELLED and "purged" in app.get(orphan).error
    assert app.get(waits).state == JobState.BLOCKED and backend.dependents(running.id) == [waits]
    assert backend.settle([Outcome(leased, "succeeded")]) == [True]
    assert app.get(waits).state == JobState.QUEUED


def test_a_linked_enqueue_run_again_changes_nothing(redis_app) -> None:  # type: ignore[no-untyped-def]
    """A script whose reply was lost is run again (redis-py's one retry): a child that
    has moved on since is not put back to blocked with all its parents."""
    app, backend = redis_app, redis_app.backend
    parent = app.enqueue("t", [1])
    item = replace(job(2), after=(parent.id,))
    assert backend.enqueue_many([item])[0].state == JobState.BLOCKED
    assert backend.settle([Outcome(_lease(backend), "succeeded")]) == [True]
    assert app.get(item.job.id).state == JobState.QUEUED
    backend.run_calls(backend.enqueue_plan([item]).calls)
    assert app.get(item.job.id).state == JobState.QUEUED
    assert not backend.client.exists(backend.keys.queue("default").parents(item.job.id))


# -- the job hash's layout (codec.py, docs/redis.md "The job hash") --------------------


def _previous_layout_job(backend, priority: int, max_attempts: int, timeout: str) -> str:  # type: ignore[no-untyped-def]
    """A queued job as the previous release's enqueue.lua stored it: every field, the
    times as 17-digit text, updated_at and run_at equal to created_at."""
    from deferq.job import new_job_id

    qk, job_id = backend.keys.queue("default"), new_job_id()
    seconds, micros = backend.client.time()
    created = "%.17g" % (seconds + micros / 1_000_000)
    backend.client.hset(qk.job(job_id), mapping={
        "task": "t", "payload": "[[7],{}]", "priority": str(priority), "state": "queued",
        "max_attempts": str(max_attempts), "timeout": timeout, "run_at": created,
        "created_at": created, "updated_at": created})
    backend.client.zadd(qk.waiting[priority], {job_id: created})
    backend.client.sadd(backend.keys.queues, "default")
    return job_id


def test_a_job_stored_by_the_previous_layout_is_read_run_and_settled(redis_app) -> None:  # type: ignore[no-untyped-def]
    backend = redis_app.backend
    qk = backend.keys.queue("default")
    high = _previous_layout_job(backend, 0, 1, "")
    normal = _previous_layout_job(backend, 1, 3, "300.0")
    low = _previous_layout_job(backend, 2, 5, "12.5")
    read = {job_id: backend.get(job_id) for job_id in (high, normal, low)}
    for job_id, priority, max_attempts, timeout in ((high, 0, 1, None), (normal, 1, 3, 300.0), (low, 2, 5, 12.5)):
        job_ = read[job_id]
        created = float(backend.client.hget(qk.job(job_id), "created_at"))
        assert (job_.state, job_.task, job_.args, job_.priority) == (JobState.QUEUED, "t", (7,), priority)
        assert (job_.max_attempts, job_.timeout) == (max_attempts, timeout)
        assert job_.run_at == job_.created_at == job_.updated_at == created
    leased = backend.reserve(["default"], 3, "w", 30, (0, 1, 2))
    assert [j.id for j in leased] == [high, normal, low]
    assert [(j.priority, j.max_attempts, j.timeout) for j in leased] == [(0, 1, None), (1, 3, 300.0), (2, 5, 12.5)]
    assert backend.settle([Outcome(leased[0], "succeeded", result=7), Outcome(leased[1], "release"),
                           Outcome(leased[2], "retry", delay=60, error="boom")]) == [True] * 3
    assert (backend.get(high).state, backend.get(high).result) == (JobState.SUCCEEDED, 7)
    assert backend.client.zscore(qk.waiting[1], normal) == read[normal].run_at  # its due time kept
    assert backend.get(normal).state == JobState.QUEUED
    assert (backend.get(low).state, backend.get(low).error) == (JobState.SCHEDULED, "boom")
    [again] = backend.reserve(["default"], 1, "w", 30, (0, 1, 2))  # normal, its lease then lost:
    backend.client.zadd(qk.active, {again.id: 0})
    backend.recover_expired()
    assert backend.get(normal).state == JobState.QUEUED  # attempt 1 of its stored 3


def _identity(n: int) -> int:
    return n


def test_a_new_job_is_a_lean_record_until_touched(redis_app) -> None:  # type: ignore[no-untyped-def]
    backend = redis_app.backend
    qk = backend.keys.queue("default")
    task = redis_app.task(name="t")(_identity)
    plain = task.enqueue(1)  # the task defaults
    assert backend.client.exists(qk.job(plain.id)) == 0  # no hash of its own yet: a field of `new`
    assert backend.client.hget(qk.new, plain.id).split(b"\n")[1:] == [b"t", b"", b"[[1],{}]"]
    assert backend.get(plain.id) == plain
    assert backend.get(plain.id).updated_at == plain.created_at
    other = redis_app.enqueue("u", [2], priority=0, max_attempts=1, delay=30)  # not a task: no timeout
    stored = record_fields(backend.client.hget(qk.new, other.id))
    assert (stored[b"priority"], stored[b"max_attempts"], stored[b"timeout"]) == (b"0", b"1", b"")
    assert backend.get(other.id) == other
    assert backend.set_remark(other.id, "seen")  # touched: its hash holds the record's fields
    assert backend.client.hget(qk.new, other.id) is None
    assert backend.get(other.id) == replace(other, remark="seen", updated_at=backend.get(other.id).updated_at)
    keyed = task.options(key="k").enqueue(3)  # enqueue.lua: a hash at once, as lean
    assert set(backend.client.hgetall(qk.job(keyed.id))) == {b"task", b"payload", b"state", b"ct", b"key"}
    assert backend.get(keyed.id) == keyed
    # a lease lost on its last attempt ends the job: recover.lua knows the left-out default
    for attempt in range(1, plain.max_attempts + 1):
        [leased] = backend.reserve(["default"], 1, "w", 30, (1,))
        assert (leased.id, leased.attempts) == (plain.id, attempt)
        backend.client.zadd(qk.active, {plain.id: 0})
        backend.recover_expired()
        assert backend.client.zscore(qk.waiting[1], plain.id) in (None, plain.run_at)  # its due time kept
    assert backend.get(plain.id).state == JobState.DEAD


def test_every_script_loads_on_the_server_under_the_sha_it_is_called_by(redis_url: str) -> None:
    """Scripts are read from their files at their first use (scripts.Script): each one's
    text, helpers included, compiles on Redis and is known there by the SHA that EVALSHA
    sends."""
    from deferq.backends.redis import scripts

    client = deferq.App(redis_url).backend.client
    found = [value for value in vars(scripts).values() if isinstance(value, scripts.Script)]
    assert len(found) == len(list((Path(scripts.__file__).parent / "lua").glob("[!_]*.lua")))
    for script in found:
        assert client.script_load(script.source) == script.sha, script.name


def test_one_job_is_stored_as_a_batch_would_store_it(redis_app) -> None:  # type: ignore[no-untyped-def]
    """task.enqueue() sends add.lua packed from a template per queue and settings
    (RedisBackend._add_one): each kind's settings, and the job's own id and record,
    exactly as a batch of it stores them; on a server that lost its scripts too."""
    backend = redis_app.backend
    task = redis_app.task(name="t")(_identity)
    kinds = [task, task.options(priority=0, max_attempts=5, timeout=7.5), task.options(queue="other"),
             task.options(timeout=None)]

    def record(job: Job) -> tuple[list[bytes], bool]:  # after the creation time; in its ready list
        qk = backend.keys.queue(job.queue)
        ready = job.id.encode() in backend.client.lrange(qk.ready[job.priority], 0, -1)
        return backend.client.hget(qk.new, job.id).split(b"\n")[1:], ready

    for round_ in range(3):
        if round_ == 2:
            backend.client.script_flush()
        for n, kind in enumerate(kinds):
            one, (batch,) = kind.enqueue(n, "é"), redis_app.enqueue_many([kind.call(n, "é")])
            assert record(one) == record(batch) and record(one)[1] and one.id != batch.id
            assert backend.get(one.id) == one and one.state == JobState.QUEUED and one.created_at > 0
    assert redis_app.stats()["default"]["queued"] == 18 and redis_app.stats()["other"]["queued"] == 6


def test_a_leased_job_is_the_job_its_hash_holds_after_the_lease(redis_app) -> None:  # type: ignore[no-untyped-def]
    """reserve builds each leased job from the hash before the lease and what the lease
    wrote (codec.leased_job): the same job a read of the hash gives, whatever it holds."""
    backend = redis_app.backend
    qk = backend.keys.queue("default")
    task = redis_app.task(name="t")(_identity)
    lean = task.enqueue(1)
    full = redis_app.enqueue("u", [2], {"k": [1]}, priority=0, max_attempts=5, timeout=12.5, key="k1",
                             remark="note", expires=600)
    no_timeout = redis_app.enqueue("u", [3], priority=2)
    retried = task.enqueue(4)
    [first] = backend.reserve(["default"], 1, "w0", 30, (1,))  # a new job's record (add.lua)
    assert (first.id, first.attempts) == (lean.id, 1) and first == backend.get(first.id)
    backend.settle([Outcome(first, "release")])
    taken = backend.reserve(["default"], 4, "w0", 30, (1,))  # lean and retried
    assert {j.id for j in taken} == {lean.id, retried.id}
    assert [backend.get(j.id) for j in taken] == taken
    backend.settle([Outcome(j, "retry", delay=0, error="boom") for j in taken])
    edited = task.options(remark="a hash at once").enqueue(5)  # fields a person or an older
    # release may leave in a hash (a plain job has a record, not a hash, until claimed)
    backend.client.hset(qk.job(edited.id), mapping={
        "progress": "0.5", "progress_message": "half", "result": "[1]", "finished_at": "12.5",
        "cancel_requested_at": "", "created_at": f"{edited.created_at:.17g}"})
    backend.client.hdel(qk.job(edited.id), "ct")
    odd = task.options(remark="a hash at once").enqueue(6)
    backend.client.hset(qk.job(odd.id), mapping={"priority": "7", "payload": "[[6],{}]"})  # read carefully
    leased = backend.reserve(["default"], 10, "w1", 30, (0, 1, 2))
    assert {j.id for j in leased} == {lean.id, full.id, no_timeout.id, retried.id, edited.id, odd.id}
    for job_ in leased:
        assert job_ == backend.get(job_.id)
        assert (job_.state, job_.worker, job_.last_worker) == (JobState.ACTIVE, "w1", "w1")
    by_id = {j.id: j for j in leased}
    assert (by_id[lean.id].attempts, by_id[lean.id].error) == (2, "boom")
    assert (by_id[full.id].key, by_id[full.id].remark, by_id[full.id].timeout) == ("k1", "note", 12.5)
    assert by_id[no_timeout.id].timeout is None
    assert (by_id[edited.id].progress, by_id[edited.id].result) == (0.5, [1])
    assert by_id[odd.id].priority == 2


_names = st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\x00")  # deferq stores no NUL
_task_names = st.text(_names, min_size=1, max_size=12)
_text = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
_json = st.recursive(st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(_text, max_size=8),
                     lambda inner: st.lists(inner, max_size=3), max_leaves=6)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    task=_task_names, args=st.lists(_json, max_size=3), priority=st.sampled_from([0, 1, 2]),
    max_attempts=st.integers(1, 12), timeout=st.one_of(st.none(), st.floats(0.5, 1e5)),
    delay=st.sampled_from([0.0, 0.25, 90.0]),
)
def test_a_record_reads_as_the_job_stored_before_and_after_it_gets_its_hash(  # type: ignore[no-untyped-def]
    redis_app, task, args, priority, max_attempts, timeout, delay
) -> None:
    """add.lua's record, read by codec.py (get) and by _lib.lua (the hash a remark makes,
    then the claim), is the job enqueue returned, whatever its task name, arguments and
    settings."""
    backend = redis_app.backend
    qk = backend.keys.queue("default")
    job = redis_app.enqueue(task, args, priority=priority, max_attempts=max_attempts, timeout=timeout, delay=delay)
    assert backend.client.hexists(qk.new, job.id) and not backend.client.exists(qk.job(job.id))
    assert backend.get(job.id) == job
    assert backend.set_remark(job.id, "touched")
    touched = backend.get(job.id)
    assert touched == replace(job, remark="touched", updated_at=touched.updated_at)
    backend.client.zadd(qk.waiting[priority], {job.id: 0})  # due now, whatever its delay
    leased = backend.reserve(["default"], 1, "w", 30, (priority,))
    assert [(j.id, j.task, j.args, j.max_attempts, j.timeout, j.priority) for j in leased] == [
        (job.id, task, tuple(args), max_attempts, timeout, priority)
    ]
    backend.client.delete(qk.job(job.id), qk.active)


def test_threads_that_come_and_go_never_exhaust_the_connection_pool(redis_url: str) -> None:
    """Each store call borrows one of the lane's own connections and gives it back: 200
    short-lived threads (the progress writer ends its thread after each write) reuse a
    few sockets and never count against redis-py's `max_connections`."""
    app = deferq.App(f"{redis_url}&max_connections=4")
    app.enqueue("t", [1])
    [stored] = app.backend.reserve(["default"], 1, "w", 60, (1, 0, 2))  # progress is for a leased job
    errors: list[BaseException] = []

    def touch() -> None:
        try:
            app.backend.record_progress([replace(stored, progress=0.5, progress_message="half")])
        except BaseException as exc:  # noqa: BLE001 - the assertion below reports it
            errors.append(exc)

    for _ in range(50):
        threads = [threading.Thread(target=touch) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    assert errors == []
    assert app.get(stored.id).progress_message == "half"
    assert app.backend._lane.open_connections() <= 4  # at most as many as ran at once
    app.close()


def test_a_worker_whose_jobs_report_progress_keeps_its_connections(redis_url: str) -> None:
    """Every progress report starts the writer's thread anew; 150 of them leave every
    report stored, no error logged, and no more sockets than the worker's threads use."""
    from deferq.worker import Worker, WorkerConfig

    app = deferq.App(f"{redis_url}&max_connections=12")

    @app.task
    def report(n: int) -> int:
        deferq.current_job().progress(0.5, f"half of {n}")
        return n

    jobs = [report.enqueue(n) for n in range(150)]
    assert Worker(app, WorkerConfig(burst=True, concurrency=2)).run() == 0
    done = [app.get(j.id) for j in jobs]
    expected = [(JobState.SUCCEEDED, f"half of {n}") for n in range(150)]
    assert [(j.state, j.progress_message) for j in done] == expected
    assert app.backend._lane.open_connections() <= 4
    app.close()


def test_an_expiring_namespace_takes_its_index_with_it(redis_app) -> None:  # type: ignore[no-untyped-def]
    """kv_expire sets every record's and the index's expiry in one call (a job's checkpoints
    leave no index behind); a record put later without expiry keeps the index alive."""
    backend = redis_app.backend
    index = backend.keys.kv_index("ns-expire")
    backend.kv_put("ns-expire", "a", b"1")
    backend.kv_put("ns-expire", "b", b"2")
    assert backend.kv_expire("ns-expire", 60) == 2
    assert 0 < backend.client.pttl(index) <= 60_000
    backend.kv_put("ns-expire", "c", b"3", ttl=120)
    assert backend.client.pttl(index) > 60_000  # as long as its longest record
    backend.kv_put("ns-expire", "d", b"4")
    assert backend.client.pttl(index) == -1 and len(backend.kv_list("ns-expire")) == 4


def test_a_producer_names_its_queues_again_after_the_server_lost_them(redis_app, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A server that lost its data (restarted without persistence) forgets the queue
    registry; a long-lived producer names its queues again within REGISTER_AGAIN, so the
    recovery sweep and the stats see the jobs it enqueues after (here the registry entry
    alone is dropped, and the window shortened to cross it)."""
    from deferq.backends.redis import backend as redis_backend

    monkeypatch.setattr(redis_backend, "REGISTER_AGAIN", 0.3)
    app = redis_app

    @app.task(name="renamed-noop", queue="renamed-q")
    def noop() -> None: ...

    noop.enqueue()
    assert "renamed-q" in app.stats()
    app.backend.client.srem(app.backend.keys.queues, "renamed-q")  # the server lost it
    deadline = time.monotonic() + 5
    while "renamed-q" not in app.stats():
        assert time.monotonic() < deadline, "the queue was never named again"
        noop.enqueue()
        time.sleep(0.05)
    assert app.stats()["renamed-q"]["queued"] >= 2


def test_async_enqueues_reuse_one_connection_and_outlive_a_restart(tmp_path: Path) -> None:
    """`enqueue_async` on one server sends its script on the event loop's own lane: one
    connection for calls made one after another; after Redis restarts (the connection
    is dead), the next call retries on a fresh one and stores its job."""
    import asyncio

    server = RedisServer(tmp_path / "r").start()
    app = deferq.App(f"redis://127.0.0.1:{server.port}/0")
    send = app.task(name="send")(lambda n: n)
    try:
        async def produce() -> tuple[list[deferq.Job], int, deferq.Job]:
            before = [await send.enqueue_async(n) for n in range(20)]
            _, lane = app.backend._async_client()
            held = len(lane._idle)
            server.kill()
            server.start()  # same port, no data: the lane's connection is dead
            after = await send.enqueue_async(99)
            return before, held, after

        before, held, after = asyncio.run(produce())
        assert held == 1
        assert [j.args for j in before] == [(n,) for n in range(20)]
        new = app.backend.keys.queue("default").new
        assert app.backend.client.hkeys(new) == [after.id.encode()]  # stored anew; the restart lost the rest
    finally:
        app.close()
        server.stop()


def test_an_async_enqueue_to_a_stalled_server_ends_at_the_socket_timeout(tmp_path: Path) -> None:
    """A server that stops answering (SIGSTOP) fails an `enqueue_async` with one sentence
    once the socket timeout has run out, for the call and its one retry; the connection
    it stalled on is dropped, and the next call after the server wakes works."""
    import asyncio
    import os
    import signal

    server = RedisServer(tmp_path / "r").start()
    app = deferq.App(f"redis://127.0.0.1:{server.port}/0?socket_timeout=0.5")
    send = app.task(name="send")(lambda n: n)
    assert server.process is not None
    try:
        async def produce() -> tuple[float, str, int, deferq.Job]:
            await send.enqueue_async(1)
            os.kill(server.process.pid, signal.SIGSTOP)
            started = time.monotonic()
            try:
                with pytest.raises(StoreUnavailable) as raised:
                    await send.enqueue_async(2)
                took = time.monotonic() - started
            finally:
                os.kill(server.process.pid, signal.SIGCONT)
            _, lane = app.backend._async_client()
            idle = len(lane._idle)
            return took, str(raised.value), idle, await send.enqueue_async(3)

        took, said, idle, later = asyncio.run(produce())
        assert 0.9 <= took < 5, took  # 0.5 s for the call, 0.5 for its retry on a fresh connection
        assert "\n" not in said and "Traceback" not in said
        assert idle == 0
        assert app.get(later.id).args == (3,)
    finally:
        app.close()
        server.stop()


def test_async_enqueues_from_one_asyncio_run_after_another_keep_no_sockets(redis_url: str) -> None:
    """A script that calls asyncio.run() for each enqueue has a new event loop each time;
    the connections of a finished loop are let go, not kept for a loop that will never
    run again (30 runs: sockets and loops held stay flat)."""
    import asyncio
    import gc
    import os

    def sockets() -> int:
        found = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                found += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
            except FileNotFoundError:  # the listing's own descriptor, closed by now
                continue
        return found

    app = deferq.App(redis_url)
    send = app.task(name="send")(lambda n: n)
    asyncio.run(send.enqueue_async(0))
    gc.collect()
    before = sockets()
    jobs = [asyncio.run(send.enqueue_async(n)) for n in range(1, 31)]
    gc.collect()
    assert sockets() <= before + 2, f"{sockets() - before} sockets more after 30 runs"
    assert len(app.backend._async) == 1
    assert [app.get(j.id).args for j in jobs] == [(n,) for n in range(1, 31)]
    app.close()


def test_many_async_enqueues_at_once_share_at_most_max_connections(redis_url: str) -> None:
    """200 coroutines enqueueing at once on one event loop: every job stored, on no more
    connections than the URL's max_connections (the rest wait for one)."""
    import asyncio

    app = deferq.App(f"{redis_url}&max_connections=4")
    send = app.task(name="send")(lambda n: n)

    async def produce() -> tuple[list[deferq.Job], int]:
        jobs = await asyncio.gather(*(send.enqueue_async(n) for n in range(200)))
        _, lane = app.backend._async_client()
        return list(jobs), len(lane._idle)

    jobs, held = asyncio.run(produce())
    assert 1 <= held <= 4
    assert sorted(app.get(j.id).args[0] for j in jobs) == list(range(200))
    app.close()
