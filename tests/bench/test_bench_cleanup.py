"""`deferq bench` on a store that holds other things: afterwards the store holds nothing
of the bench's (no job, no history counter, no queue listed, no kv record), and it
never touches another queue's jobs."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

import pytest

import deferq
from deferq.backends.base import Outcome, OutcomeKind
from deferq.cli.bench import run_bench

pytestmark = pytest.mark.timeout(120)

Snapshot = Callable[[], object]


def redis_snapshot(url: str) -> Snapshot:
    from tests.support.stores.redis import shared_client

    prefix = parse_qs(urlsplit(url).query)["prefix"][0]

    def keys() -> object:
        client = shared_client()
        try:
            return sorted(client.scan_iter(match=f"*{prefix}*", count=1000))
        finally:
            client.close()

    return keys


def sqlite_snapshot(url: str) -> Snapshot:
    path = url.removeprefix("sqlite:///")

    def rows() -> object:
        with sqlite3.connect(path) as db:
            # the text-search index's list of changed rows is left out: the store's own
            # maintenance empties it (it names rows, deleted or not, not the bench)
            tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                      if "fts" not in t]
            return {t: sorted(map(repr, db.execute(f'SELECT * FROM "{t}"'))) for t in tables}

    return rows


def postgres_snapshot(url: str, admin: object) -> Snapshot:
    conn, schema = admin  # type: ignore[misc]

    def rows() -> object:
        tables = [t for (t,) in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", [schema])]
        return {t: sorted(map(repr, conn.execute(f'SELECT * FROM "{schema}"."{t}"'))) for t in tables}

    return rows


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def store(request: pytest.FixtureRequest) -> tuple[str, Snapshot]:
    url: str = request.getfixturevalue(f"{request.param}_url")
    if request.param == "redis":
        return url, redis_snapshot(url)
    if request.param == "sqlite":
        return url, sqlite_snapshot(url)
    return url, postgres_snapshot(url, request.getfixturevalue("postgres_admin"))


def test_bench_leaves_nothing_of_its_own(store: tuple[str, Snapshot]) -> None:
    url, snapshot = store
    app = deferq.App(url)
    other = app.task(name="other_work", queue="other")(lambda: None)
    done = other.enqueue()
    [leased] = app.backend.reserve(["other"], 1, "test", 30, (0, 1, 2))
    app.backend.settle([Outcome(leased, OutcomeKind.SUCCEEDED)])
    app.close()
    before = snapshot()

    results = run_bench(url, jobs=20, processes=1, as_json=True, only={"enqueue", "process"}, concurrency=2)

    assert results["process_per_s"] > 0
    assert snapshot() == before  # the other queue's finished job included
    app = deferq.App(url)
    try:
        assert app.get(done.id).state == "succeeded"
    finally:
        app.close()
