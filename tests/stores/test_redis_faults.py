"""Redis faults with real processes: a worker killed mid-job, Redis killed with AOF on,
Redis stopped for 10 s, and job hashes corrupted by hand (issue 3)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import deferq
from deferq.errors import StoreUnavailable
from deferq.job import JobState
from deferq.task import Call
from deferq.worker import Worker, WorkerConfig
from tests.support.stores.redis import RedisServer, shared_url, unique_prefix, wait_until

ROOT = Path(__file__).resolve().parents[2]
DEFERQ = str(Path(sys.executable).parent / "deferq")


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def start_worker(
    started: list[subprocess.Popen[bytes]], url: str, control: str, log: Path, lease: float = 2
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DEFERQ_TEST_LEASE": str(lease), "DEFERQ_TEST_CONTROL": control}
    env.pop("DEFERQ_APP", None)
    process = subprocess.Popen(
        [DEFERQ, "worker", "--app", "tests.support.fixtures_redis:app", "--url", url,
         "--queue", "default", "--concurrency", "8"],
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
    )
    started.append(process)
    return process


def states(app: deferq.App, ids: list[str]) -> dict[str, int]:
    """How many of `ids` are in each state (one pipelined read)."""
    backend = app.backend
    pipe = backend.client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hget(backend.keys.queue("default").job(job_id), "state")
    counts: dict[str, int] = {}
    for state in pipe.execute():
        name = state.decode() if state else "missing"
        counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.mark.slow
def test_killed_worker_jobs_come_back_after_the_lease(workers, tmp_path: Path, redis_url: str) -> None:
    control = shared_url()  # the redis_url fixture has checked that it answers
    flag = f"{unique_prefix()}:hold"
    client = redis.Redis.from_url(control)
    client.set(flag, 1)
    app = deferq.App(redis_url, lease=2)
    try:
        ids = [app.enqueue("hold", [flag]).id for _ in range(3)]
        first = start_worker(workers, redis_url, control, tmp_path / "w1.log")
        wait_until(lambda: int(client.get(flag + ":started") or 0) == 3, 30, "jobs did not start")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        assert states(app, ids) == {"active": 3}
        client.delete(flag)
        start_worker(workers, redis_url, control, tmp_path / "w2.log")
        wait_until(lambda: states(app, ids) == {"succeeded": 3}, 30, "jobs did not come back")
        assert all(app.get(i).attempts == 2 for i in ids)
    finally:
        client.delete(flag, flag + ":started")
        app.close()


@pytest.mark.slow
def test_redis_killed_with_aof_loses_no_returned_enqueue(workers, tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "aof", None, "--appendonly", "yes", "--appendfsync", "always")
    server.start()
    url = f"redis://127.0.0.1:{server.port}/0?prefix=crash"
    control = f"redis://127.0.0.1:{server.port}/1"
    app = deferq.App(url)
    returned: list[str] = []
    failures = 0
    killed = threading.Event()

    def killer() -> None:  # kill -9 at a moment unrelated to the producer's calls
        wait_until(lambda: len(returned) >= 3_000, 60, "the run did not get going")
        server.kill()
        killed.set()

    try:
        for _ in range(2):
            start_worker(workers, url, control, tmp_path / "workers.log")
        threading.Thread(target=killer, daemon=True).start()
        total, batch = 10_000, 50
        while len(returned) < total:
            try:
                jobs = app.enqueue_many([Call("noop", (n,), {}) for n in range(batch)])
            except StoreUnavailable:
                failures += 1
                if killed.wait(10) and server.process and server.process.poll() is not None:
                    server.start()  # the same AOF directory and port
                continue
            returned += [job.id for job in jobs]
        assert failures >= 1, "the server was never down"
        wait_until(
            lambda: states(app, returned) == {"succeeded": len(returned)}, 60,
            f"not every returned enqueue was processed: {states(app, returned)}",
        )
        assert all(w.poll() is None for w in workers), "a worker died with Redis"
    finally:
        app.close()
        for w in workers:
            w.terminate()
        server.stop()


@pytest.mark.slow
def test_redis_down_for_10s_workers_say_so_and_resume(workers, tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "down", None, "--appendonly", "yes")
    server.start()
    url = f"redis://127.0.0.1:{server.port}/0?prefix=down"
    control = f"redis://127.0.0.1:{server.port}/1"
    log = tmp_path / "worker.log"
    app = deferq.App(url)
    try:
        start_worker(workers, url, control, log)
        job = app.enqueue("noop", [1])
        wait_until(lambda: app.get(job.id).state == JobState.SUCCEEDED, 15, "no work before")
        server.stop()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match=r"cannot be reached"):
            app.enqueue("noop", [2])
        assert time.monotonic() - started < 5, "a producer must fail fast, not hang"
        time.sleep(10)
        assert workers[0].poll() is None, "the worker crashed while Redis was down"
        server.start()
        back = time.monotonic()
        job = app.enqueue("noop", [3])
        wait_until(lambda: app.get(job.id).state == JobState.SUCCEEDED, 5, "no resume")
        assert time.monotonic() - back < 2.5, "the worker took more than 2 s to resume"
        text = log.read_text()
        assert "cannot be reached" in text
        assert text.count("store unreachable") <= 3, "the outage must be reported once, not per retry"
        assert "Traceback" not in text
    finally:
        app.close()
        server.stop()


def test_corrupted_job_and_unknown_task_go_dead_and_the_worker_goes_on(redis_url: str) -> None:
    app = deferq.App(redis_url, lease=5)

    @app.task(max_attempts=1)
    def fine(n: int) -> int:
        return n

    try:
        broken = fine.enqueue(1)
        unknown = app.enqueue("no_such_task", [1])
        weird = fine.options(remark="a hash at once").enqueue(2)
        gone = fine.enqueue(3)
        good = fine.enqueue(4)
        mangled = fine.enqueue(5)
        client, keys = app.backend.client, app.backend.keys.queue("default")
        record = client.hget(keys.new, broken.id)  # a new job's record (add.lua), its payload last
        client.hset(keys.new, broken.id, record.rsplit(b"\n", 1)[0] + b"\n{not json")
        client.hset(keys.job(weird.id), mapping={"attempts": "zz", "max_attempts": "?", "timeout": "x"})
        client.hdel(keys.new, gone.id)  # its id stays in the queue: a dangling reference
        client.hset(keys.new, mangled.id, b"no lines at all")
        assert "_unreadable_payload" in app.get(mangled.id).kwargs
        worker = Worker(app, WorkerConfig(queues=("default",), burst=True, concurrency=2))
        runner = threading.Thread(target=worker.run)
        runner.start()
        runner.join(30)
        assert not runner.is_alive()
        assert app.get(broken.id).state == JobState.DEAD
        assert "payload" in app.get(broken.id).error
        assert app.get(unknown.id).state == JobState.DEAD
        assert "unknown task" in app.get(unknown.id).error
        assert app.get(weird.id).state == JobState.DEAD  # unreadable fields: dead, with why
        assert "max_attempts" in app.get(weird.id).error
        assert app.get(gone.id) is None
        assert app.get(mangled.id).state == JobState.DEAD
        assert "no lines at all" in app.get(mangled.id).kwargs["_unreadable_payload"]  # kept, to read
        assert app.get(good.id).state == JobState.SUCCEEDED
        assert app.get(good.id).result == 4
    finally:
        app.close()
