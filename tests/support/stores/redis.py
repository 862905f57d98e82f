"""Redis stores for the behaviour suite: the shared server, a cluster, and two shards.

- `redis_url`: the shared Redis of `DEFERQ_TEST_REDIS` (default 127.0.0.1:6379, db 1),
  under a unique key prefix (other test sessions use the same server: nothing here
  flushes it). The suite uses no other database of that server: a test that needs a
  second database or a server to flush starts a redis-server of its own (`RedisServer`).
- `redis_cluster_url`: a 3-master Redis Cluster this session starts on free ports.
- `redis_shards_url`: two independent redis-servers this session starts.
Servers started here live in a temporary directory and stop at the session's end.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

#: the shared Redis the suite may use (never flushed: every test keeps to a key prefix)
TEST_REDIS = os.environ.get("DEFERQ_TEST_REDIS", "redis://127.0.0.1:6379/1")


def shared_url(prefix: str | None = None) -> str:
    """`DEFERQ_TEST_REDIS`, under key prefix `prefix` when given."""
    parts = urlsplit(TEST_REDIS)
    query = dict(parse_qsl(parts.query))
    if prefix is not None:
        query["prefix"] = prefix
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))


def shared_where() -> str:
    """host:port/db of the shared Redis, without credentials, for skip messages."""
    parts = urlsplit(TEST_REDIS)
    return f"{parts.hostname}:{parts.port or 6379}{parts.path}"


def shared_client():  # type: ignore[no-untyped-def]
    """A redis-py client of the shared Redis, on the setting's database."""
    import redis

    return redis.Redis.from_url(shared_url(), socket_timeout=5, socket_connect_timeout=2)


def shared_answers() -> bool:
    import redis

    try:
        client = redis.Redis.from_url(shared_url(), socket_timeout=0.5, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
        return False


def delete_prefix(prefix: str) -> None:
    """Delete the keys under `prefix` (hash-tagged or not) in the shared Redis. The job
    counts that Apps a test left open still hold are written first: else their history
    recorders would write them after the delete (within seconds, or at exit)."""
    from deferq.observe import history

    for recorder in list(history._RECORDERS):
        recorder.write()  # never raises
    client = shared_client()
    try:
        for pattern in (f"{{{prefix}:*", f"{prefix}:*"):
            batch = list(client.scan_iter(match=pattern, count=1000))
            for i in range(0, len(batch), 500):
                client.delete(*batch[i : i + 500])
    finally:
        client.close()


#: connections this process opened to the shared server on a database not the setting's
strays: list[str] = []


def watch_connections() -> None:
    """Note every redis-py connection (sync or asyncio) this process opens to the shared
    server on a database other than `DEFERQ_TEST_REDIS`'s; `only_the_given_database`
    fails the test that opened one."""
    try:
        import redis.asyncio.connection
        import redis.connection
    except ImportError:
        return
    parts = urlsplit(TEST_REDIS)
    loopback = {"127.0.0.1", "localhost", "::1"}
    hosts = loopback if parts.hostname in loopback else {parts.hostname}
    port, own = parts.port or 6379, int(parts.path.strip("/") or 0)

    for cls in (redis.connection.AbstractConnection, redis.asyncio.connection.AbstractConnection):
        original = cls.connect
        if getattr(original, "watched", False):
            continue

        def connect(self, *args, _original=original, **kwargs):  # type: ignore[no-untyped-def]
            if getattr(self, "host", None) in hosts and getattr(self, "port", None) == port and self.db != own:
                strays.append(f"{self.host}:{self.port}/{self.db}")
            return _original(self, *args, **kwargs)

        connect.watched = True  # type: ignore[attr-defined]
        cls.connect = connect  # type: ignore[method-assign]


def pytest_configure(config: pytest.Config) -> None:
    watch_connections()


@pytest.fixture(autouse=True)
def only_the_given_database() -> Iterator[None]:
    """A test that connects to another database of the shared Redis fails: the suite
    touches only what `DEFERQ_TEST_REDIS` gives it."""
    before = len(strays)
    yield
    opened = strays[before:]
    del strays[before:]
    assert not opened, f"connected to {opened}: use shared_url() or a RedisServer of the test's own"


#: every key prefix this process handed out, and the test it was handed to
#: (tests/support/stores/leftovers.py checks them at the end)
issued: dict[str, str] = {}
PREFIX_SHAPE = re.compile(r"^\{?(t[0-9a-f]{12})[:}]")  # the prefix of a key under a unique_prefix()


def unique_prefix() -> str:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    issued[prefix] = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
    return prefix


def keys_left(prefixes: Iterable[str]) -> dict[str, list[str]]:
    """The keys of the shared Redis under `prefixes` (one SCAN of its database), by prefix."""
    found: dict[str, list[str]] = {}
    prefixes = set(prefixes)
    client = shared_client()
    try:
        for key in client.scan_iter(count=1000):
            match = PREFIX_SHAPE.match(key.decode(errors="replace"))
            if match and match[1] in prefixes:
                found.setdefault(match[1], []).append(key.decode(errors="replace"))
    finally:
        client.close()
    return found


def free_port(avoid_bus: bool = False) -> int:
    """A free TCP port (and, for cluster nodes, port + 10000 free as well)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535 and avoid_bus:
            continue
        if not avoid_bus or _is_free(port + 10000):
            return port


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_until(check, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise TimeoutError(f"{what} after {timeout}s")


def answers(port: int) -> bool:
    import redis

    try:
        return bool(redis.Redis(port=port, socket_timeout=0.5, socket_connect_timeout=0.5).ping())
    except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
        return False


class RedisServer:
    """A redis-server process this test session owns (never the shared one)."""

    def __init__(self, directory: Path, port: int | None = None, *options: str) -> None:
        self.port = port or free_port()
        self.directory = directory
        self.options = options
        self.process: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)

    def start(self) -> RedisServer:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
             str(self.directory), "--save", "", *self.options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: answers(self.port), 15, f"redis-server on port {self.port} did not start")
        return self

    def kill(self) -> None:
        """kill -9: a crash, not a shutdown."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def _need_redis_server() -> None:
    from tests.conftest import need_service

    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        need_service("redis-server", "redis-server and redis-cli are not on PATH")


@pytest.fixture
def redis_url() -> Iterator[str]:
    from tests.conftest import need_service

    if not shared_answers():
        need_service("Redis", f"nothing answers at {shared_where()} (DEFERQ_TEST_REDIS)")
    prefix = unique_prefix()
    yield shared_url(prefix=prefix)
    delete_prefix(prefix)


@pytest.fixture(scope="session")
def redis_cluster_ports() -> Iterator[list[int]]:
    """A 3-master Redis Cluster on free ports (bench/redis_servers.py: the benchmarks'
    and the endurance run's servers start there too)."""
    from bench.redis_servers import Topology, started

    _need_redis_server()
    with started(Topology.parse("cluster:3")) as ports:
        yield ports


@pytest.fixture
def redis_cluster_url(redis_cluster_ports: list[int]) -> str:
    nodes = ",".join(f"127.0.0.1:{p}" for p in redis_cluster_ports)
    return f"redis+cluster://{nodes}?prefix={unique_prefix()}"


@pytest.fixture(scope="session")
def redis_shard_ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    _need_redis_server()
    base = tmp_path_factory.mktemp("redis-shards")
    servers = []
    try:
        for i in range(2):
            servers.append(RedisServer(base / f"shard{i}", None, "--appendonly", "no").start())
        yield [s.port for s in servers]
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
def redis_shards_url(redis_shard_ports: list[int]) -> str:
    servers = ",".join(f"127.0.0.1:{p}/0" for p in redis_shard_ports)
    return f"redis+shards://{servers}?prefix={unique_prefix()}"


__all__ = [
    "RedisServer", "TEST_REDIS", "answers", "delete_prefix", "free_port", "issued", "keys_left", "shared_answers",
    "shared_client", "shared_url", "shared_where", "strays", "unique_prefix", "wait_until", "watch_connections",
]
