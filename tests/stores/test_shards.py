"""redis+shards:// with one server killed: a job's id names its server, so look-ups by id
answer for every job on a server that answers; stats and listings name the servers that
did not answer; new jobs go to the servers left (issue 11, item 12)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import deferq
from deferq.backends.base import Enqueue, Outcome, OutcomeKind, Stats, missing_from
from deferq.backends.redis.shards import shard_of_id
from deferq.errors import StoreUnavailable
from deferq.job import Job, JobState, mark_id, new_job_id
from deferq.observe import history
from deferq.worker import Worker, WorkerConfig
from tests.support.stores.redis import RedisServer, _need_redis_server, unique_prefix

ORDER = (1, 0, 2)


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[list[RedisServer]]:
    _need_redis_server()
    servers = [RedisServer(tmp_path / f"s{i}").start() for i in (0, 1)]
    yield servers
    for server in servers:
        server.stop()


def shards_url(servers: list[RedisServer]) -> str:
    return "redis+shards://" + ",".join(f"127.0.0.1:{s.port}/0" for s in servers) + f"?prefix={unique_prefix()}"


def item(n: int, **fields: object) -> Enqueue:
    return Enqueue(Job(id=new_job_id(), task="t", args=(n,), **fields))  # type: ignore[arg-type]


def keyed_for(backend, shard: int, start: int = 0) -> str:  # type: ignore[no-untyped-def]
    """A unique key that hashes to `shard`."""
    n = start
    while backend._key_shard(f"key{n}") != shard:
        n += 1
    return f"key{n}"


# -- the id scheme -------------------------------------------------------------------------


def test_marked_ids_name_their_shard_sort_by_creation_and_stay_unique() -> None:
    ids = [new_job_id() for _ in range(20_000)]
    for shard in (0, 1, 7, 8, 255):
        marked = [mark_id(job_id, shard) for job_id in ids]
        assert all(len(m) == 26 and shard_of_id(m) == shard for m in marked)
        assert marked == sorted(marked) and len(set(marked)) == len(marked)
        assert [mark_id(m, shard) for m in marked[:100]] == marked[:100], "marking twice changes nothing"
    spread = [mark_id(job_id, n % 3) for n, job_id in enumerate(ids)]  # round robin over 3 servers
    assert spread == sorted(spread), "ids on different servers still sort by creation"
    assert mark_id(mark_id(ids[0], 3), 5) == mark_id(ids[0], 5)
    assert mark_id(ids[0], 1)[:10] == ids[0][:10], "the milliseconds are kept"


def test_ids_not_made_by_the_shards_name_no_shard() -> None:
    assert shard_of_id(new_job_id()) is None  # ends in 00 like every id job.new_job_id makes
    for other in ("x", "01NOSUCHJOB0000000000000000", "", "0" * 25 + "2"):
        assert shard_of_id(other) is None
        assert mark_id(other, 1) == other


# -- one server killed ---------------------------------------------------------------------


def test_one_shard_killed_jobs_on_the_other_are_found_managed_and_counted(two_servers) -> None:
    a, b = two_servers
    app = deferq.App(shards_url(two_servers), lease=30)
    backend = app.backend
    try:
        jobs = [backend.enqueue_many([item(n)])[0] for n in range(6)]  # round robin: 3 on each
        assert sorted(shard_of_id(j.id) for j in jobs) == [0, 0, 0, 1, 1, 1]
        on_a = [j for j in jobs if shard_of_id(j.id) == 0]
        on_b = [j for j in jobs if shard_of_id(j.id) == 1]
        assert backend.shards[0].get(on_a[0].id) is not None, "the id names the server it is on"
        # one job of each server goes dead, so there is something to retry
        leased = backend.reserve(["default"], 10, "w", 30, ORDER)
        dead = [next(j for j in leased if j.id == on_a[0].id), next(j for j in leased if j.id == on_b[0].id)]
        backend.settle([Outcome(j, OutcomeKind.DEAD, error="boom") for j in dead])
        backend.settle([Outcome(j, OutcomeKind.RELEASE) for j in leased if j not in dead])
        key_a = keyed_for(backend, 0)
        keyed = app.enqueue("t", [9], key=key_a)
        assert shard_of_id(keyed.id) == 0
        b_name = f"127.0.0.1:{b.port}/0"

        b.kill()

        assert app.get(on_a[1].id).state == JobState.QUEUED  # raised StoreUnavailable before
        assert app.get_by_key(key_a).id == keyed.id
        assert app.cancel(on_a[1].id) is True
        assert app.get(on_a[1].id).state == JobState.CANCELLED
        assert app.retry_dead(on_a[0].id) is True
        assert app.get(on_a[0].id).state == JobState.QUEUED
        assert app.get(mark_id(new_job_id(), 0)) is None, "a's answer is the whole answer for its ids"
        for call in (app.get, app.cancel, app.retry_dead):
            with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{b.port}"):
                call(on_b[1].id)  # it is on b: never "no such job"
        with pytest.raises(StoreUnavailable, match="may be on Redis shard"):
            app.get(new_job_id())  # an id no shard made could be on b

        stats = backend.stats()
        assert isinstance(stats, Stats) and missing_from(stats) == [b_name]
        assert app.stats().missing == [b_name] and app.stats()["default"]["queued"] == 3
        assert stats["default"].counts["queued"] == 3  # a's: on_a[0] (retried), on_a[2], keyed
        assert stats["default"].counts["cancelled"] == 1
        listed = app.list_jobs("queued")
        assert {j.id for j in listed} == {on_a[0].id, on_a[2].id, keyed.id}
        assert missing_from(listed) == [b_name]
        assert backend.check() == [b_name]

        new = [app.enqueue("t", [n]) for n in range(4)]  # enqueue keeps working, on a
        assert {shard_of_id(j.id) for j in new} == {0}
        with pytest.raises(StoreUnavailable, match="cannot be reached"):
            app.enqueue("t", [0], key=keyed_for(backend, 1))  # its key belongs to b
        taken = backend.reserve(["default"], 10, "w", 30, ORDER)  # workers drain a
        assert {j.id for j in taken} == {on_a[0].id, on_a[2].id, keyed.id} | {j.id for j in new}
        backend.settle([Outcome(j, OutcomeKind.SUCCEEDED) for j in taken])

        b.start()  # empty again (no persistence): it answers, and nothing is missing
        backend._down_until[1] = 0.0
        assert missing_from(backend.stats()) == [] and backend.check() == []
        assert app.get(on_b[1].id) is None
    finally:
        app.close()


def test_ids_from_before_the_marks_are_looked_for_on_every_server(two_servers) -> None:
    """A job stored under an unmarked id (e.g. by an older deferq) is still found."""
    a, b = two_servers
    app = deferq.App(shards_url(two_servers))
    backend = app.backend
    try:
        old_a = backend.shards[0].enqueue_many([item(1)])[0]
        old_b = backend.shards[1].enqueue_many([item(2)])[0]
        assert shard_of_id(old_a.id) is None
        assert app.get(old_b.id).args == (2,)
        leased = backend.reserve(["default"], 10, "w", 30, ORDER)
        assert backend.heartbeat(leased, 30) == set()
        assert backend.settle([Outcome(j, OutcomeKind.RELEASE) for j in leased]) == [True, True]
        b.kill()
        assert app.get(old_a.id).args == (1,)
        assert app.cancel(old_a.id) is True
        with pytest.raises(StoreUnavailable, match="may be on Redis shard"):
            app.get(old_b.id)
    finally:
        app.close()


def test_api_with_one_shard_killed_answers_and_names_it(two_servers) -> None:
    from deferq.server import ServerConfig, create_app
    from tests.support.server_helpers import TestClient

    a, b = two_servers
    app = deferq.App(shards_url(two_servers))
    try:
        with TestClient(create_app(ServerConfig(auth=False, error_log="off"), app)) as api:
            created = [api.post("/v1/jobs", json={"task": "t"}).json()["id"] for _ in range(2)]
            first = api.post("/v1/jobs", json={"task": "t", "key": "k", "delay_ms": 60_000})
            again = api.post("/v1/jobs", json={"task": "t", "key": "k"})
            assert (first.status_code, again.status_code) == (201, 200), "new, then its key's holder"
            assert again.json()["id"] == first.json()["id"]
            assert api.get("/readyz").json() == {"status": "ready"}
            b.kill()
            b_name = f"127.0.0.1:{b.port}/0"
            ready = api.get("/readyz")
            assert ready.status_code == 200 and ready.json()["missing"] == [b_name]
            queues = api.get("/v1/queues").json()
            assert queues["missing"] == [b_name] and queues["queues"]["default"]["queued"] == 1
            on_a = next(i for i in created if shard_of_id(i) == 0)
            assert api.get(f"/v1/jobs/{on_a}").json()["state"] == "queued"
            assert api.delete(f"/v1/jobs/{on_a}").status_code == 200
            answer = api.post("/v1/jobs", json={"task": "t"})
            assert answer.status_code == 201 and shard_of_id(answer.json()["id"]) == 0
            a.kill()
            for method, path in [("GET", "/readyz"), ("POST", "/v1/jobs"), ("GET", "/v1/queues")]:
                answer = api.request(method, path, json={"task": "t"} if method == "POST" else None)
                assert answer.status_code == 503, (path, answer.text)
    finally:
        app.close()


def test_a_pause_reaches_every_server_and_says_when_one_missed_it(two_servers) -> None:
    url = shards_url(two_servers)
    app = deferq.App(url)
    try:
        two_servers[1].kill()
        with pytest.raises(StoreUnavailable, match="cannot be reached"):
            app.pause("mail")  # paused where it could be: pausing again once it is back is safe
        assert app.paused().keys() == {"mail"}  # from the server that answers
        assert app.backend.shards[0].paused().keys() == {"mail"}
        two_servers[1].start()
        app.backend._down_until = [0.0, 0.0]  # don't wait out RETRY_DOWN
        assert app.pause("mail") is True  # the server that missed it is paused now
        assert all(shard.paused().keys() == {"mail"} for shard in app.backend.shards)
        for n in range(4):
            app.enqueue("t", [n], queue="mail")
        assert app.backend.reserve(["mail"], 10, "w", 30.0, ORDER) == []
        assert app.resume("mail") is True
        assert len(app.backend.reserve(["mail"], 10, "w", 30.0, ORDER)) == 4
    finally:
        app.close()


# -- workflows across servers (backends/redis/flows.py) ------------------------------------


def test_a_workflow_keeps_its_ids_and_links_across_servers(two_servers) -> None:
    """Jobs of a call with `after` keep their ids (a workflow names them before they are
    stored), a keyed one still goes to its key's server, and the links cross servers:
    the chain runs in order, and cancelling its first job cancels the rest."""
    app = deferq.App(shards_url(two_servers))
    backend = app.backend
    first, second, third = (item(n) for n in (1, 2, 3))
    second = replace(second, job=second.job.evolve(key=keyed_for(backend, 1)), after=(first.job.id,))
    third = replace(third, after=(second.job.id,))
    stored = backend.enqueue_many([first, second, third])
    assert [j.id for j in stored] == [first.job.id, second.job.id, third.job.id]
    assert [j.state for j in stored] == [JobState.QUEUED, JobState.BLOCKED, JobState.BLOCKED]
    assert backend.shards[1].get(second.job.id) is not None  # its key's server
    assert backend.dependents(first.job.id) == [second.job.id]
    for expected in stored:
        [leased] = backend.reserve(["default"], 10, "w", 30, ORDER)
        assert leased.id == expected.id
        assert backend.settle([Outcome(leased, OutcomeKind.SUCCEEDED)]) == [True]
    assert backend.count_states([j.id for j in stored]) == {"succeeded": 3}
    again = backend.enqueue_many([item(4)])
    chain = backend.enqueue_many([replace(item(6), after=(again[0].id,))])
    assert backend.cancel(again[0].id)
    assert backend.get(chain[0].id).state == JobState.CANCELLED and again[0].id in backend.get(chain[0].id).error
    app.close()


def test_side_records_on_a_killed_shard_are_said_once_and_history_written_when_it_is_back(two_servers,
                                                                                          caplog) -> None:
    """History and a worker's own records (its status, its orders) are side records kept
    on one server of the set: while that server is down, producers and workers go on,
    each is one warning line (not one per job, nor the worker's "store unreachable"
    error), and the history counts kept meanwhile are written once it is back."""
    app = deferq.App(shards_url(two_servers), lease=30)
    task = app.task(name="hist.t")(lambda n: n)
    backend = app.backend
    home = backend.shards.index(backend._kv_shard("history", ""))
    name = next(name for n in range(1000) if all(  # a worker whose records are kept there too
        backend._kv_shard(namespace, name := f"w{n}") is backend.shards[home]
        for namespace in ("workers", "worker-orders")))
    try:
        with caplog.at_level(logging.INFO):
            two_servers[home].kill()
            jobs = [task.enqueue(n) for n in range(20)]  # on the server that answers
            assert Worker(app, WorkerConfig(name=name, burst=True, concurrency=2)).run() == 0  # writes at its stop
            for _ in range(3):  # the recorder's next rounds, and leases the store ends by itself
                app.history.write()
                backend.shards[1 - home].count_ended([("default", "hist.t", "expired")])
            assert {app.get(job.id).state for job in jobs} == {JobState.SUCCEEDED}
            said = {r.name: r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING}
            warned = [(r.name, r.levelname) for r in caplog.records if r.levelno >= logging.WARNING]
            assert sorted(warned) == [("deferq.history", "WARNING"), ("deferq.limits", "WARNING"),
                                      ("deferq.worker", "WARNING")], said  # once each
            assert said["deferq.worker"].startswith("this worker's status and orders cannot be reached")
            assert said["deferq.history"].startswith("history not written (kept for the next try)")
            assert said["deferq.limits"].startswith("limits: the store's limits could not be read")
            two_servers[home].start()  # empty again: what was kept is all there is
            backend._down_until[home] = 0.0
            app.history.write()
        assert any(r.getMessage().startswith("history written again") for r in caplog.records)
        totals = history.read(backend, 5, 5, task="hist.t")["totals"]
        assert (totals["enqueued"], totals["succeeded"]) == (20, 20)
    finally:
        app.close()
