"""mysql:// for the behaviour suite: a database of its own per test session (created
here, dropped at the end), emptied before each test."""

from __future__ import annotations

import os
import uuid

import pytest

SERVER = os.environ.get("DEFERQ_TEST_MYSQL", "mysql://root@127.0.0.1:3306")
#: every database name this process handed out (tests/support/stores/leftovers.py checks them at the end)
made: set[str] = set()


def new_database(prefix: str = "deferq_test") -> str:
    """A database name of this session's own (the caller creates and drops it)."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    made.add(name)
    return name


def databases_left(names: set[str]) -> list[str]:
    """Which of `names` exist on the test server (an empty list without MySQL)."""
    from urllib.parse import urlsplit

    import pymysql

    parts = urlsplit(SERVER)
    try:
        conn = pymysql.connect(host=parts.hostname, port=parts.port or 3306, user=parts.username or "root",
                               password=parts.password or "", autocommit=True, connect_timeout=3)
    except pymysql.err.OperationalError:
        return []
    with conn, conn.cursor() as cur:
        cur.execute("SELECT schema_name FROM information_schema.schemata WHERE schema_name IN %s", [sorted(names)])
        return sorted(row[0] for row in cur.fetchall())


def mysql_admin_connection():
    """An autocommit PyMySQL connection to the test server (no database selected)."""
    from urllib.parse import urlsplit

    import pymysql

    from tests.conftest import need_service

    parts = urlsplit(SERVER)
    try:
        return pymysql.connect(
            host=parts.hostname, port=parts.port or 3306, user=parts.username or "root",
            password=parts.password or "", autocommit=True, connect_timeout=3,
        )
    except pymysql.err.OperationalError as exc:
        need_service("MySQL/MariaDB", str(exc))


@pytest.fixture(scope="session")
def mysql_admin():
    """The admin connection and the session's database name."""
    conn = mysql_admin_connection()
    database = new_database()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
    yield conn, database
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
    conn.close()


@pytest.fixture(scope="session")
def mysql_session_url(mysql_admin) -> str:
    from deferq.backends import open_backend

    url = f"{SERVER}/{mysql_admin[1]}"
    open_backend(url).close()  # migrates once
    return url


@pytest.fixture
def mysql_url(mysql_admin, mysql_session_url) -> str:
    from deferq.backends.sql.base import TABLES

    conn, database = mysql_admin
    with conn.cursor() as cur:
        for table in ("jobs", "kv", "paused", "fair", "holds"):
            cur.execute(f"TRUNCATE TABLE `{database}`.{TABLES[table]}")
    return mysql_session_url


@pytest.fixture
def mysql_update_url(mysql_url) -> str:
    """The same store, claiming the way servers without SKIP LOCKED must (S3-1)."""
    return f"{mysql_url}?claim=update"
