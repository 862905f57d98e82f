"""postgresql:// for the behaviour suite: a schema of its own per test session (the
shared `test` database serves other suites too), emptied before each test."""

from __future__ import annotations

import os
import uuid

import pytest

BASE_URL = os.environ.get("DEFERQ_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
#: every schema name this process handed out (tests/support/stores/leftovers.py checks them at the end)
made: set[str] = set()


def new_schema(prefix: str = "deferq_test") -> str:
    """A schema name of this session's own (the caller creates and drops it)."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    made.add(name)
    return name


def schemas_left(names: set[str]) -> list[str]:
    """Which of `names` exist in the test database (an empty list without PostgreSQL)."""
    import psycopg

    try:
        conn = psycopg.connect(BASE_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError:
        return []
    with conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname = ANY(%s)", [sorted(names)])
        return sorted(row[0] for row in rows)


def _connect():
    import psycopg

    from tests.conftest import need_service

    try:
        return psycopg.connect(BASE_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        need_service("PostgreSQL", str(exc).strip().splitlines()[0])


@pytest.fixture(scope="session")
def postgres_admin():
    """An autocommit psycopg connection to the test database, and the session's schema."""
    conn = _connect()
    schema = new_schema()
    yield conn, schema
    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    conn.close()


@pytest.fixture(scope="session")
def postgres_session_url(postgres_admin) -> str:
    from deferq.backends import open_backend

    _, schema = postgres_admin
    url = f"{BASE_URL}?schema={schema}"
    open_backend(url).close()  # migrates once
    return url


@pytest.fixture
def postgres_url(postgres_admin, postgres_session_url) -> str:
    from deferq.backends.sql.base import TABLES

    conn, schema = postgres_admin
    tables = ", ".join(f'"{schema}".{TABLES[t]}' for t in ("jobs", "kv", "paused", "fair", "holds"))
    conn.execute(f"TRUNCATE {tables} RESTART IDENTITY")
    return postgres_session_url
