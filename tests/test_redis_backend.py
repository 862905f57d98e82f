"""Redis-specific behaviour beyond the shared suite: shards with one server down,
URL forms and bad URLs, blocking waits across servers."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import deferq
from deferq.backends.base import Enqueue
from deferq.errors import ConfigError, StoreUnavailable
from deferq.job import Job, JobState
from tests.stores.redis import RedisServer, unique_prefix


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
    from tests.stores.redis import free_port

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
