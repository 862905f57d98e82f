"""Emptying a peer's store between workloads: only what the benchmark owns.

Redis: FLUSHDB of the benchmark's own database number (never another database).
SQLite: the peer's file (and its WAL) in the benchmark's own folder, removed.
PostgreSQL: the peer's own database (bench_peers_*) dropped and created anew; the
connection goes to the server's `postgres` database to do it."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import redis

from . import probe

OWN_DATABASE_PREFIX = "bench_peers"
SQLITE_DIR = Path(__file__).resolve().parents[1] / "results" / "sqlite"  # not committed


def sqlite_url(peer: str) -> str:
    SQLITE_DIR.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{SQLITE_DIR / peer}.db"


def remove_sqlite(url: str) -> None:
    path = Path(url.removeprefix("sqlite:///"))
    if path.parent != SQLITE_DIR:
        raise ValueError(f"refusing to remove {path}: only files in {SQLITE_DIR} are ours")
    for name in (path.name, f"{path.name}-wal", f"{path.name}-shm"):
        (path.parent / name).unlink(missing_ok=True)
    SQLITE_DIR.mkdir(parents=True, exist_ok=True)


def reset(url: str) -> None:
    """Empty `url`'s store and the probe's Redis database."""
    redis.Redis.from_url(probe.REDIS_URL).flushdb()
    scheme = urlsplit(url).scheme
    if scheme.startswith("redis"):
        redis.Redis.from_url(url).flushdb()
    elif scheme.startswith("postgres"):
        recreate_database(url)
    elif scheme == "sqlite":
        remove_sqlite(url)
    else:
        raise ValueError(f"the peer benchmark cannot empty a {scheme}:// store")


def drop(url: str) -> None:
    """Leave nothing behind after a run: empty the Redis database, drop our own database."""
    redis.Redis.from_url(probe.REDIS_URL).flushdb()
    if urlsplit(url).scheme.startswith("redis"):
        redis.Redis.from_url(url).flushdb()
    elif urlsplit(url).scheme.startswith("postgres"):
        recreate_database(url, create=False)
    elif urlsplit(url).scheme == "sqlite":
        remove_sqlite(url)


def recreate_database(url: str, create: bool = True) -> None:
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = parts.path.strip("/")
    if not name.startswith(OWN_DATABASE_PREFIX):
        raise ValueError(f"refusing to drop {name!r}: only {OWN_DATABASE_PREFIX}* databases are ours")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if create:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
