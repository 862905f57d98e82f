"""Store errors at the boundary: the SQL stores raise deferq's StoreUnavailable when
the store cannot be used right now, and StoreFull when it is out of space, never their
driver's errors; a malformed URL is a ConfigError.

SQLite is checked by making each fault for real (a file where its directory should be,
a file that is no database, a writer holding the lock, a size limit standing in for a
full disk). PostgreSQL and MySQL are checked at their translation, `unavailable()`, with
the errors their drivers raise for a full disk."""

from __future__ import annotations

import sqlite3

import psycopg
import pymysql
import pytest

import deferq
from deferq.backends import Enqueue, Outcome, open_backend
from deferq.backends.sql import sqlite as sqlite_backend
from deferq.errors import ConfigError, StoreFull, StoreUnavailable
from deferq.job import Job, new_job_id


def enqueue(backend, **fields) -> list[Job]:
    return backend.enqueue_many([Enqueue(Job(id=new_job_id(), task="t", **fields))])


def test_store_full_is_a_store_unavailable_users_can_import():
    assert issubclass(deferq.StoreFull, deferq.StoreUnavailable) and "StoreFull" in deferq.__all__


@pytest.mark.parametrize("url, message", [
    ("sqlite://", "names no file"),
    ("sqlite:///x.db?synchronous=sometimes", "must be off, normal or full"),
    ("sqlite:///x.db?no_such_option=1", "unknown option 'no_such_option'"),
    ("sqlite:///x.db?migrate=perhaps", "must be true or false"),
])
def test_a_malformed_sqlite_url_is_a_config_error(url, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=message):
        open_backend(url)


def test_a_sqlite_file_that_cannot_be_opened(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the database's directory should be")
    with pytest.raises(StoreUnavailable, match="cannot open the SQLite database"):
        open_backend(f"sqlite:///{blocker}/deferq.db")


def test_a_file_that_is_no_sqlite_database(tmp_path):
    path = tmp_path / "deferq.db"
    path.write_bytes(b"this is not a database\n" * 200)
    with pytest.raises(StoreUnavailable, match="not a database"):
        open_backend(f"sqlite:///{path}")


def test_a_sqlite_store_locked_past_the_busy_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_backend, "BUSY_TIMEOUT", 0.05)
    path = tmp_path / "deferq.db"
    backend = open_backend(f"sqlite:///{path}")
    waiting = enqueue(backend)[0]
    leased = backend.reserve(["default"], 1, "w1", 30, [1])
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer that does not let go
    try:
        writes = [
            lambda: enqueue(backend),
            lambda: enqueue(backend, key="k"),
            lambda: backend.reserve(["default"], 1, "w2", 30, [1]),
            lambda: backend.heartbeat(leased, 30),
            lambda: backend.settle([Outcome(leased[0], "succeeded")]),
            lambda: backend.settle([Outcome(leased[0], "retry", delay=1, error="e")]),
            lambda: backend.cancel(waiting.id),
            lambda: backend.recover_expired(),
            lambda: backend.purge(["succeeded"]),
            lambda: backend.kv_put("n", "k", b"v"),
            lambda: backend.kv_put("n", "k", b"v", only_new=True),
        ]
        for write in writes:
            with pytest.raises(StoreUnavailable, match="locked"):
                write()
        assert backend.get(waiting.id) is not None  # readers never wait in WAL mode
    finally:
        holder.rollback()
        holder.close()
    assert backend.settle([Outcome(leased[0], "succeeded")]) == [True]  # and it carries on
    backend.close()


def test_a_full_sqlite_store_is_store_full(tmp_path):
    backend = open_backend(f"sqlite:///{tmp_path}/deferq.db")
    conn = backend.connection()  # this thread's: a size limit stands in for a full disk
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
    with pytest.raises(StoreFull, match="out of space"):
        enqueue(backend, args=("x" * 100_000,))
    with pytest.raises(StoreFull):
        backend.kv_put("n", "k", b"x" * 100_000)
    backend.close()


def test_postgres_out_of_disk_is_store_full(postgres_url):
    backend = open_backend(postgres_url)
    try:
        full = psycopg.errors.DiskFull('could not extend file "base/1/2": No space left on device')
        assert isinstance(backend.unavailable(full), StoreFull)
        assert type(backend.unavailable(psycopg.OperationalError("server closed"))) is StoreUnavailable
    finally:
        backend.close()


def test_mysql_out_of_space_is_store_full(mysql_url):
    backend = open_backend(mysql_url)
    try:
        for code, message in [(1114, "The table 'deferq_jobs' is full"), (1021, "Disk full (/tmp)")]:
            assert isinstance(backend.unavailable(pymysql.err.OperationalError(code, message)), StoreFull)
        lost = pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
        assert type(backend.unavailable(lost)) is StoreUnavailable
    finally:
        backend.close()
