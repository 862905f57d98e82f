"""Redis errors that tell the truth (issue 11, item 6): a database the server lacks and a
refused password are one-sentence ConfigErrors (they will not fix themselves), a Redis
out of memory is StoreFull, and neither is ever "cannot be reached ... retries"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import deferq
from deferq.backends.base import Enqueue
from deferq.backends.redis.shards import shard_of_id
from deferq.errors import ConfigError, StoreFull, StoreUnavailable
from deferq.job import Job, new_job_id
from tests.support.stores.redis import RedisServer, _need_redis_server, unique_prefix


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator:  # type: ignore[type-arg]
    """start_server(*options): a redis-server of this test's own."""
    _need_redis_server()
    started: list[RedisServer] = []

    def start(*options: str) -> RedisServer:
        server = RedisServer(tmp_path / f"s{len(started)}", None, *options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def with_password(server: RedisServer, password: str) -> RedisServer:
    """As --requirepass would (set once the server answers: the start-up check has none)."""
    import redis

    client = redis.Redis(port=server.port)
    client.config_set("requirepass", password)
    client.close()
    return server


def one_sentence(exc: BaseException) -> str:
    text = str(exc)
    assert len(text.splitlines()) == 1 and "Traceback" not in text, text
    assert "cannot be reached" not in text and "retries" not in text, text
    return text


def test_a_database_the_server_lacks_is_a_config_error(start_server) -> None:
    server = start_server("--databases", "4")
    app = deferq.App(f"redis://127.0.0.1:{server.port}/99?prefix={unique_prefix()}")
    try:
        for call in (lambda: app.enqueue("t"), lambda: app.get("x"), app.stats):
            with pytest.raises(ConfigError) as raised:
                call()
            text = one_sentence(raised.value)
            assert f"Redis at 127.0.0.1:{server.port}: database 99 does not exist on this server" in text
            assert "(it has 4: 0 to 3)" in text
    finally:
        app.close()


def test_a_refused_password_is_a_config_error_that_never_shows_it(start_server) -> None:
    server = with_password(start_server(), "s3cret-pass")
    where = f"127.0.0.1:{server.port}"
    for url, why in [(f"redis://{where}/0", "the server wants a password and the URL gives none"),
                     (f"redis://:wrong-pass@{where}/0", "refused the URL's user and password"),
                     (f"redis://bob:wrong-pass@{where}/0", "refused the URL's user and password")]:
        app = deferq.App(f"{url}?prefix={unique_prefix()}")
        try:
            for call in (lambda: app.enqueue("t"), lambda: app.get("x"), app.backend.ping):  # noqa: B023
                with pytest.raises(ConfigError) as raised:
                    call()
                text = one_sentence(raised.value)
                assert f"Redis at {where}: authentication failed" in text and why in text
                assert "wrong-pass" not in text and "s3cret" not in text
        finally:
            app.close()
    app = deferq.App(f"redis://:s3cret-pass@{where}/0?prefix={unique_prefix()}")
    assert app.get(app.enqueue("t").id) is not None
    app.close()


def test_the_command_line_says_it_in_one_sentence(start_server) -> None:
    from deferq.cli.main import main

    server = with_password(start_server(), "s3cret-pass")
    result = CliRunner().invoke(main, ["stats", "--url", f"redis://127.0.0.1:{server.port}/0"])
    assert result.exit_code == 2, result.output
    assert "authentication failed" in result.output and "Traceback" not in result.output


def test_out_of_memory_is_store_full_and_loses_nothing_acknowledged(start_server) -> None:
    server = start_server("--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
    app = deferq.App(f"redis://127.0.0.1:{server.port}/0?prefix={unique_prefix()}")
    task = app.task(name="t")(lambda blob: None)
    acknowledged: list[str] = []
    try:
        with pytest.raises(StoreFull) as raised:
            for _ in range(10_000):  # 2 MB hold several hundred of these
                batch = app.enqueue_many([task.call("x" * 200) for _ in range(10)])
                acknowledged += [job.id for job in batch]
        assert len(acknowledged) > 100, "the server refused before it was full"
        assert isinstance(raised.value, StoreUnavailable)  # workers wait for room as for a restart
        text = str(raised.value)
        assert len(text.splitlines()) == 1
        assert f"Redis at 127.0.0.1:{server.port} is out of memory during enqueue" in text
        backend = app.backend
        assert set(backend.queues_of(acknowledged)) == set(acknowledged), "an acknowledged job is missing"
        assert app.stats()["default"]["queued"] == len(acknowledged), "more was stored than acknowledged"
        assert app.purge(["dead"]) == 0  # reads and deletes still work
    finally:
        app.close()


def test_a_full_shard_leaves_new_jobs_to_the_others(start_server) -> None:
    full = start_server("--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
    roomy = start_server()
    url = f"redis+shards://127.0.0.1:{full.port}/0,127.0.0.1:{roomy.port}/0?prefix={unique_prefix()}"
    app = deferq.App(url)
    backend = app.backend
    try:
        with pytest.raises(StoreFull):
            for _ in range(10_000):
                backend.shards[0].enqueue_many([Enqueue(Job(new_job_id(), "t", ("x" * 200,))) for _ in range(10)])
        # at the edge a small job may still fit: make the server firmly full
        used = backend.shards[0].client.info("memory")["used_memory"]
        backend.shards[0].client.config_set("maxmemory", used // 2)
        jobs = [app.enqueue("t") for _ in range(4)]
        assert {shard_of_id(job.id) for job in jobs} == {1}
        assert backend.stats().missing == [], "a full server still answers"
    finally:
        app.close()
