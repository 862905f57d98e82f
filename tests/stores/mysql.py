"""mysql:// for the behaviour suite: a database of its own per test session (created
here, dropped at the end), emptied before each test."""

from __future__ import annotations

import os
import uuid

import pytest

SERVER = os.environ.get("DEFERQ_TEST_MYSQL", "mysql://root@127.0.0.1:3306")


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
    database = f"deferq_test_{uuid.uuid4().hex[:10]}"
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
        for table in ("jobs", "kv", "paused", "fair"):
            cur.execute(f"TRUNCATE TABLE `{database}`.{TABLES[table]}")
    return mysql_session_url


@pytest.fixture
def mysql_update_url(mysql_url) -> str:
    """The same store, claiming the way servers without SKIP LOCKED must (S3-1)."""
    return f"{mysql_url}?claim=update"
