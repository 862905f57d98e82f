"""Everything a store keeps, as the bytes an operator (or a stolen backup) would read:
the SQLite file with its WAL, every row of the SQL tables, every Redis key (DUMP and
its value by type), a memory:// store's objects by repr. Tests look for a secret in it."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import deferq
from deferq.backends.sql.base import TABLES
from deferq.loading import sqlite_file


def raw_bytes(app: deferq.App, live_only: bool = False) -> bytes:
    """`live_only`: a SQLite store's rows, not its file (whose free pages and WAL keep what
    was overwritten until they are reused: a rotation's old values among them)."""
    url = app.url
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        return _memory(app.backend).encode()
    if scheme == "sqlite":
        path = sqlite_file(url)
        assert path is not None
        if live_only:
            return _sqlite_rows(str(path))
        return b"".join(p.read_bytes() for p in (path, path.with_name(path.name + "-wal")) if p.exists())
    if scheme.startswith("redis"):
        return b"".join(_redis_keys(client, prefix) for client, prefix in _redis_clients(url))
    if scheme.startswith("postgres"):
        return _postgres(url)
    if scheme.startswith("mysql"):
        return _mysql(url)
    raise AssertionError(f"no raw reader for {url}")


def _sqlite_rows(path: str) -> bytes:
    import sqlite3

    with sqlite3.connect(path) as conn:
        return b"".join(repr(conn.execute(f"SELECT * FROM {table}").fetchall()).encode()
                        for table in TABLES.values())


def _memory(backend: Any) -> str:
    return repr({name: value for name, value in vars(backend).items() if not name.startswith("_changed")})


def _redis_clients(url: str) -> list[tuple[Any, str]]:
    import redis

    parts = urlsplit(url)
    prefix = parse_qs(parts.query).get("prefix", ["deferq"])[0]
    if parts.scheme == "redis+cluster":
        host, port = parts.netloc.split(",")[0].split(":")
        return [(redis.RedisCluster(host=host, port=int(port)), prefix)]
    if parts.scheme == "redis+shards":
        servers = url.split("://", 1)[1].split("?", 1)[0].split(",")
        return [(redis.Redis.from_url(f"redis://{server}"), prefix) for server in servers]
    return [(redis.Redis.from_url(url.split("?")[0]), prefix)]


def _redis_keys(client: Any, prefix: str) -> bytes:
    out = []
    for key in client.scan_iter(match=f"*{prefix}*", count=1000):
        out.append(key)
        out.append(client.dump(key) or b"")
        kind = client.type(key).decode()
        if kind == "hash":
            out.append(repr(client.hgetall(key)).encode())
        elif kind == "string":
            out.append(client.get(key) or b"")
        elif kind == "list":
            out.append(repr(client.lrange(key, 0, -1)).encode())
        elif kind == "set":
            out.append(repr(client.smembers(key)).encode())
        elif kind == "zset":
            out.append(repr(client.zrange(key, 0, -1)).encode())
        elif kind == "stream":
            out.append(repr(client.xrange(key)).encode())
    return b"".join(out)


def _postgres(url: str) -> bytes:
    import psycopg

    schema = parse_qs(urlsplit(url).query).get("schema", ["public"])[0]
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        return b"".join(repr(conn.execute(f'SELECT * FROM "{schema}".{table}').fetchall()).encode()
                        for table in TABLES.values())


def _mysql(url: str) -> bytes:
    import pymysql

    parts = urlsplit(url)
    conn = pymysql.connect(host=parts.hostname, port=parts.port or 3306, user=unquote(parts.username or "root"),
                           password=unquote(parts.password or ""), database=parts.path.lstrip("/"))
    try:
        with conn.cursor() as cur:
            found = []
            for table in TABLES.values():
                cur.execute(f"SELECT * FROM {table}")
                found.append(repr(cur.fetchall()).encode())
            return b"".join(found)
    finally:
        conn.close()
