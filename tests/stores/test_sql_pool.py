"""PostgreSQL's connection pool hands out the connection given back last: one thread that
enqueues job after job keeps one server process busy, not several in turn."""

from __future__ import annotations

import pytest

import deferq
from deferq.backends.sql.postgres import NewestFirstPool
from tests.support.stores.postgres import BASE_URL, _connect

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def server():
    _connect().close()  # skips without PostgreSQL (fails in CI)
    return BASE_URL


def backend_pid(conn) -> int:
    return conn.execute("SELECT pg_backend_pid()").fetchone()[0]


def test_the_connection_given_back_last_comes_out_first(server):
    with NewestFirstPool(server, min_size=2, max_size=2, open=True, kwargs={"autocommit": True}) as pool:
        pool.wait(10)
        first, second = pool.getconn(), pool.getconn()
        pids = backend_pid(first), backend_pid(second)
        pool.putconn(first)
        pool.putconn(second)
        used = set()
        for _ in range(10):  # one after another, as a producer's thread enqueues
            with pool.connection() as conn:
                used.add(backend_pid(conn))
        assert used == {pids[1]}, f"rotated over {used} (psycopg_pool's own order), not the newest {pids[1]}"


def test_enqueues_one_after_another_use_one_server_process(server, postgres_url):
    app = deferq.App(postgres_url)
    try:
        pool = app.backend.pool(durable=False)
        assert isinstance(pool, NewestFirstPool)
        held = [pool.getconn() for _ in range(2)]  # the pool holds two connections, as after a burst
        for conn in held:
            pool.putconn(conn)
        seen = set()
        for i in range(20):
            app.enqueue("nap", [i], durable=False)
            with pool.connection() as conn:
                seen.add(backend_pid(conn))
        assert len(seen) == 1, f"enqueues rotated over {len(seen)} server processes"
        assert app.backend.stats()["default"].counts["queued"] == 20
    finally:
        app.close()
