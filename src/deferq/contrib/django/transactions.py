"""Enqueue from inside `transaction.atomic()`: the job exists only if the transaction
commits.

When Django's database *is* the deferq store (PostgreSQL or MySQL, same server, port
and database) and Django talks to it through a driver deferq can write with (psycopg 3,
PyMySQL), the job is inserted on Django's own connection, in the open transaction:
rollback, no job; commit, the job is there, atomically with your rows. Otherwise
the enqueue waits for `transaction.on_commit`: nothing is stored if the transaction
rolls back, but a crash between the commit and the enqueue loses the job.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Iterable
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ...app import App
from ...job import Job
from ...task import Call, Task

log = logging.getLogger("deferq.django")

VENDORS = {"postgresql": "postgresql", "postgres": "postgresql", "mysql": "mysql", "mariadb": "mysql"}
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}
THIS_MACHINE = {"", "localhost", "127.0.0.1", "::1"}  # names of the local server, alike
_warned: set[str] = set()


def enqueue_on_commit(task: Task[..., Any], /, *args: Any, **kwargs: Any) -> Job | None:
    """`task.enqueue(*args, **kwargs)`, bound to the current transaction of Django's
    default database. Returns the job when it is written now (in the transaction, or
    at once outside one); None when it waits for the commit."""
    if not isinstance(task.app, App):
        raise TypeError(f"enqueue_on_commit takes a task of a deferq.App, got {task!r:.60}")
    jobs = enqueue_many_on_commit([task.call(*args, **kwargs)], app=task.app)
    return None if jobs is None else jobs[0]


def enqueue_many_on_commit(
    calls: Iterable[Call], *, app: App | None = None, using: str | None = None
) -> list[Job] | None:
    """`app.enqueue_many(calls)` bound to the current transaction of the Django
    database `using` (default: "default"). `app` defaults to the settings' App."""
    from django.db import DEFAULT_DB_ALIAS, connections, transaction  # type: ignore[import-untyped]

    if app is None:
        from .lazy import app as settings_app

        app = settings_app
    calls = list(calls)
    alias = using or DEFAULT_DB_ALIAS
    connection = connections[alias]
    if not connection.in_atomic_block and connection.get_autocommit():
        return app.enqueue_many(calls)  # no transaction to follow
    if any(call.options.connection is not None for call in calls):
        return app.enqueue_many(calls)  # the caller chose a connection: theirs to commit
    raw = shared_connection(app, connection)
    if raw is not None:
        return app.enqueue_many([replace(c, options=replace(c.options, connection=raw)) for c in calls])
    transaction.on_commit(functools.partial(app.enqueue_many, calls), using=alias)
    return None


def shared_connection(app: App, connection: Any) -> Any:
    """Django's DB-API connection, if deferq can write its jobs on it; else None."""
    if not shares_database(app.url, connection.vendor, connection.settings_dict):
        return None
    connection.ensure_connection()
    raw = connection.connection
    if not _deferq_can_write(connection.vendor, raw):
        if connection.alias not in _warned:
            _warned.add(connection.alias)
            log.warning(
                "Django's database %r is deferq's store, but its connection is a %s, not %s: "
                "enqueue_on_commit waits for each commit instead of writing in the transaction",
                connection.alias, type(raw).__module__,
                "psycopg 3" if connection.vendor == "postgresql" else "PyMySQL",
            )
        return None
    app.backend  # noqa: B018 - open (and migrate) the store first, on its own connections
    return raw


def shares_database(url: str, vendor: str, settings_dict: dict[str, Any]) -> bool:
    """Whether the deferq store `url` is the database of a Django connection (its
    `vendor` and `settings_dict`): same kind, server, port and database name."""
    parts = urlsplit(url)
    kind = VENDORS.get(parts.scheme.lower())
    if kind is None or kind != vendor:
        return False
    query = dict(parse_qsl(parts.query))
    try:
        port = int(query.get("port") or parts.port or DEFAULT_PORTS[kind])
        django_port = int(settings_dict.get("PORT") or DEFAULT_PORTS[kind])
    except ValueError:
        return False
    name = query.get("dbname") or unquote(parts.path.lstrip("/"))
    host = query.get("host") or parts.hostname or ""
    return (
        bool(name)
        and name == settings_dict.get("NAME")
        and port == django_port
        and _server(host) == _server(settings_dict.get("HOST") or "")
    )


def _server(host: str) -> str:
    host = host.strip("[]").lower()
    return "localhost" if host in THIS_MACHINE else host


def _deferq_can_write(vendor: str, raw: Any) -> bool:
    if vendor == "postgresql":
        import psycopg

        return isinstance(raw, psycopg.Connection)
    import pymysql

    return isinstance(raw, pymysql.connections.Connection)


def use_pymysql() -> None:
    """Make PyMySQL Django's MySQL driver; call it at the top of settings.py.

    `enqueue_on_commit` writes in Django's MySQL transactions only on a PyMySQL
    connection. Unlike a bare `pymysql.install_as_MySQLdb()`, this also names
    pymysql's submodules as MySQLdb's, so Django's `from MySQLdb.converters import
    ...` does not load a second copy of them, whose copy of `pymysql.err` would
    replace the original: exceptions PyMySQL raises would no longer be instances of
    `pymysql.err.OperationalError` and the like, which code (deferq's too) catches."""
    import pymysql
    import pymysql.connections  # noqa: F401 - loads every submodule Django imports

    pymysql.install_as_MySQLdb()
    for name, module in list(sys.modules.items()):
        if name.startswith("pymysql."):
            sys.modules.setdefault("MySQLdb" + name[len("pymysql") :], module)
