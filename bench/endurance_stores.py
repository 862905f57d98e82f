"""The stores of an endurance run, each of its own, and how to count their connections.

SQLite: a file in the run's folder. Redis and Redis Cluster: redis-servers started on
free ports (bench/redis_servers.py). PostgreSQL and MariaDB/MySQL: a database created on
the given server (`deferq_endurance_<hex>`) and dropped at the end, so that
pg_stat_activity and the processlist count exactly the run's connections.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench import redis_servers

STORES = ("sqlite", "redis", "redis_cluster", "postgres", "mysql")
POSTGRES = os.environ.get("DEFERQ_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL = os.environ.get("DEFERQ_TEST_MYSQL", "mysql://root@127.0.0.1:3306")


@dataclass
class Store:
    url: str
    connections: Callable[[], int | None]  # the store's client connections now (None: no such figure)
    redis_ports: list[int] = field(default_factory=list)  # Redis: the servers, for INFO memory


@contextmanager
def opened(kind: str, folder: Path, postgres: str = POSTGRES, mysql: str = MYSQL) -> Iterator[Store]:
    if kind == "sqlite":
        yield Store(f"sqlite:///{folder}/deferq.db", lambda: None)
    elif kind in ("redis", "redis_cluster"):
        topology = redis_servers.Topology.parse("cluster:3" if kind == "redis_cluster" else "single")
        with redis_servers.started(topology) as ports:
            yield Store(topology.url(ports), lambda: redis_clients(ports), ports)
    elif kind == "postgres":
        with _postgres_database(postgres) as store:
            yield store
    elif kind == "mysql":
        with _mysql_database(mysql) as store:
            yield store
    else:
        raise ValueError(f"no store {kind!r}: the stores are {', '.join(STORES)}")


def own_name() -> str:
    return f"deferq_endurance_{uuid.uuid4().hex[:10]}"


def redis_clients(ports: list[int]) -> int:
    """Clients connected to the servers, less this probe's own connection to each."""
    import redis

    total = 0
    for port in ports:
        with redis.Redis(port=port, socket_timeout=5) as client:
            total += len(client.client_list()) - 1
    return total


def redis_memory(ports: list[int]) -> int:
    """used_memory, summed over the servers (bytes)."""
    import redis

    total = 0
    for port in ports:
        with redis.Redis(port=port, socket_timeout=5) as client:
            total += int(client.info("memory")["used_memory"])
    return total


@contextmanager
def _postgres_database(base: str) -> Iterator[Store]:
    import psycopg

    name = own_name()
    admin = psycopg.connect(base, autocommit=True, connect_timeout=5)
    try:
        admin.execute(f'CREATE DATABASE "{name}"')
        parts = urlsplit(base)
        url = urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))

        def count() -> int:
            row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)).fetchone()
            return int(row[0]) if row else 0

        yield Store(url, count)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@contextmanager
def _mysql_database(server: str) -> Iterator[Store]:
    import pymysql

    name = own_name()
    parts = urlsplit(server)
    admin = pymysql.connect(host=parts.hostname, port=parts.port or 3306, user=parts.username or "root",
                            password=parts.password or "", autocommit=True, connect_timeout=5)
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}`")

        def count() -> int:
            with admin.cursor() as cur:
                cur.execute("SELECT count(*) FROM information_schema.processlist WHERE db = %s", (name,))
                row = cur.fetchone()
            return int(row[0]) if row else 0

        yield Store(f"{server.rstrip('/')}/{name}", count)
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()
