"""Transactional enqueue (S1-2, invariant 8): a job written inside the caller's own
transaction exists only if that transaction commits. Each driver the docs name:
psycopg (sync and asyncio), PyMySQL, and SQLAlchemy Connection/Session on both."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

import deferq
from deferq.errors import ConfigError
from tests.support.stores.postgres import BASE_URL as POSTGRES_BASE


def claimable(app) -> set[str]:
    """Ids of the jobs a worker can take now (and takes)."""
    return {job.id for job in app.backend.reserve(["default"], 10, "tx-test", 5.0, (0, 1, 2))}


def check_rollback_then_commit(app, connect, commit, rollback):
    """Enqueue on an open transaction: invisible until commit; gone after rollback."""
    send = app.task(name="send")(lambda n: n)

    conn = connect()
    try:
        lost = send.options(connection=conn).enqueue(1)
        rollback(conn)
        assert app.get(lost.id) is None and claimable(app) == set()

        kept = send.options(connection=conn).enqueue(2)
        [batch] = app.enqueue_many([send.options(connection=conn).call(3)])
        assert app.get(kept.id) is None, "visible before its transaction committed"
        commit(conn)
    finally:
        conn.close()
    assert app.get(kept.id).args == (2,) and app.get(batch.id).args == (3,)
    assert claimable(app) == {kept.id, batch.id}


@pytest.fixture
def pg_app(postgres_url):
    app = deferq.App(postgres_url, lease=5)
    yield app
    app.close()


@pytest.fixture
def my_app(mysql_url):
    app = deferq.App(mysql_url, lease=5)
    yield app
    app.close()


def test_psycopg(pg_app):
    import psycopg

    check_rollback_then_commit(
        pg_app, lambda: psycopg.connect(POSTGRES_BASE), lambda c: c.commit(), lambda c: c.rollback()
    )


def test_psycopg_async(pg_app):
    import psycopg

    send = pg_app.task(name="send")(lambda n: n)

    async def scenario():
        conn = await psycopg.AsyncConnection.connect(POSTGRES_BASE)
        try:
            lost = await send.options(connection=conn).enqueue_async(1)
            await conn.rollback()
            kept = await send.options(connection=conn).enqueue_async(2)
            assert pg_app.get(kept.id) is None
            await conn.commit()
        finally:
            await conn.close()
        return lost, kept

    lost, kept = asyncio.run(scenario())
    assert pg_app.get(lost.id) is None
    assert claimable(pg_app) == {kept.id}


def test_pymysql(my_app, mysql_session_url):
    import pymysql

    parts = urlsplit(mysql_session_url)

    def connect():
        return pymysql.connect(host=parts.hostname, port=parts.port, user=parts.username,
                               database=parts.path.lstrip("/"))

    check_rollback_then_commit(my_app, connect, lambda c: c.commit(), lambda c: c.rollback())


def sqlalchemy_engine(url: str):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    return sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)


@pytest.mark.parametrize("kind", ["connection", "session"])
def test_sqlalchemy_postgres(pg_app, kind):
    engine = sqlalchemy_engine(POSTGRES_BASE.replace("postgresql://", "postgresql+psycopg://"))
    check_sqlalchemy(pg_app, engine, kind)


@pytest.mark.parametrize("kind", ["connection", "session"])
def test_sqlalchemy_mysql(my_app, mysql_session_url, kind):
    engine = sqlalchemy_engine(mysql_session_url.replace("mysql://", "mysql+pymysql://"))
    check_sqlalchemy(my_app, engine, kind)


def check_sqlalchemy(app, engine, kind):
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    def connect():
        handle = Session(engine) if kind == "session" else engine.connect()
        handle.execute(text("SELECT 1"))  # the application's own work, same transaction
        return handle

    try:
        check_rollback_then_commit(app, connect, lambda h: h.commit(), lambda h: h.rollback())
    finally:
        engine.dispose()


def test_a_foreign_connection_is_refused(pg_app, my_app):
    send = pg_app.task(name="send")(lambda n: n)
    with pytest.raises(ConfigError, match="psycopg 3 connection"):
        send.options(connection=object()).enqueue(1)
    send_my = my_app.task(name="send")(lambda n: n)
    with pytest.raises(ConfigError, match="PyMySQL connection"):
        send_my.options(connection="not a connection").enqueue(1)


def test_postgres_enqueue_not_durable_skips_the_flush(postgres_url):
    """options.durable=False / App(durable=False): the enqueue commits on a session with
    synchronous_commit=off; a durable job in the batch makes it wait for the disk."""
    app = deferq.App(postgres_url, lease=5, durable=False)
    try:
        send = app.task(name="send")(lambda n: n)
        app.backend.migrate()
        app.backend.close()
        job = send.enqueue(1)
        assert set(app.backend._pools) == {False}  # the enqueue's connection came from the fast pool
        assert app.get(job.id).args == (1,)
        with app.backend.pool(False).connection() as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "off"
        app.enqueue_many([send.call(2), send.options(durable=True).call(3)])
        assert True in app.backend._pools  # one durable job: the batch waits for the disk
    finally:
        app.close()


def test_postgres_async_enqueue_not_durable_is_local_to_its_transaction(pg_app):
    send = pg_app.task(name="send")(lambda n: n)

    async def scenario():
        job = await send.options(durable=False).enqueue_async(1)
        conn = await pg_app.backend.loop_connection()
        setting = (await (await conn.execute("SHOW synchronous_commit")).fetchone())[0]
        return job, setting

    job, setting = asyncio.run(scenario())
    assert pg_app.get(job.id).args == (1,)
    assert setting == "on", "SET LOCAL must not outlive the enqueue's transaction"
