"""Redis clients from a URL, one sentence for a lost connection, and blocking waits.

URLs: redis://[[user]:password@]host[:port][/db], rediss://... (TLS),
unix:///path/to/redis.sock[?db=N], redis+cluster://host:port[,host:port...].
deferq's own query option, `prefix=` (default "deferq"), is removed before the rest
of the query goes to redis-py (e.g. `socket_timeout=3`).
"""

from __future__ import annotations

import functools
import os
import select
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import ClusterError, ReadOnlyError, RedisClusterException, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ...errors import ConfigError, StoreUnavailable
from .keys import DEFAULT_PREFIX

# Short connect timeout: a down server is reported in seconds, not minutes. One
# immediate retry: a pooled connection that died with a restarted server is replaced
# at once (every script is safe to run twice: enqueue writes the same id, the lease
# fence refuses a second settle).
CLIENT_DEFAULTS: dict[str, Any] = {"socket_connect_timeout": 2.0, "socket_timeout": 10.0}
OUR_OPTIONS = ("prefix",)
F = TypeVar("F", bound=Callable[..., Any])
# A server that is gone, loading its data, failing over (read-only, cluster down,
# try again): all "not reachable right now", retried by the worker.
LOST = (
    RedisConnectionError, RedisTimeoutError, RedisClusterException, ClusterError,
    TryAgainError, ReadOnlyError, OSError,
)  # fmt: skip


@dataclass
class Target:
    """What a URL names: where, under which prefix, and redis-py's own options."""

    url: str  # as given, without deferq's options
    where: str  # for messages: host:port or socket path
    prefix: str
    cluster: bool


def parse_url(url: str) -> Target:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    prefix = query.pop("prefix", DEFAULT_PREFIX)
    cluster = parts.scheme == "redis+cluster"
    scheme = "redis" if cluster else parts.scheme
    db = parts.path.strip("/")
    if scheme in ("redis", "rediss") and db and not db.isdigit():
        raise ConfigError(f"the Redis URL {url!r} names database {db!r}: it must be a number, e.g. /0")
    rest = f"?{urlencode(query)}" if query else ""
    clean = f"{scheme}://{parts.netloc}{parts.path}{rest}"  # urlunsplit drops unix:// slashes
    where = parts.path if parts.scheme == "unix" else (parts.netloc.rsplit("@", 1)[-1] or "localhost:6379")
    return Target(clean, where, prefix, cluster)


def sync_client(target: Target) -> Any:
    retry = Retry(NoBackoff(), 1)
    client: redis.Redis | RedisCluster
    try:
        if target.cluster:
            nodes = [_node(hostport) for hostport in urlsplit(target.url).netloc.split(",")]
            first = urlsplit(target.url)._replace(netloc=nodes[0].host + f":{nodes[0].port}")
            client = RedisCluster.from_url(urlunsplit(first), startup_nodes=nodes, retry=retry, **CLIENT_DEFAULTS)
        else:
            client = redis.Redis.from_url(target.url, retry=retry, **CLIENT_DEFAULTS)
    except LOST as exc:
        raise StoreUnavailable(f"Redis Cluster at {target.where} cannot be reached: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"bad Redis URL {target.url!r}: {exc}") from None
    return client


def async_client(target: Target) -> Any:
    if target.cluster:
        nodes = [_async_node(hostport) for hostport in urlsplit(target.url).netloc.split(",")]
        return redis.asyncio.RedisCluster(startup_nodes=nodes, **CLIENT_DEFAULTS)
    return redis.asyncio.Redis.from_url(target.url, **CLIENT_DEFAULTS)


def _split_hostport(hostport: str) -> tuple[str, int]:
    host, _, port = hostport.rsplit("@", 1)[-1].partition(":")
    try:
        return host or "localhost", int(port or 6379)
    except ValueError:
        raise ConfigError(f"bad host:port {hostport!r} in a redis+cluster:// URL") from None


def _node(hostport: str) -> ClusterNode:
    return ClusterNode(*_split_hostport(hostport))


def _async_node(hostport: str) -> Any:
    from redis.asyncio.cluster import ClusterNode as AsyncClusterNode

    return AsyncClusterNode(*_split_hostport(hostport))


@contextmanager
def reported(where: str, doing: str = "") -> Iterator[None]:
    """Turn a lost connection into StoreUnavailable with one clear sentence."""
    try:
        yield
    except LOST as exc:
        during = f" during {doing}" if doing else ""
        raise StoreUnavailable(
            f"Redis at {where} cannot be reached{during} ({type(exc).__name__}: "
            f"{exc or 'no answer'}); deferq retries when it returns"
        ) from None


def guarded(method: F) -> F:
    """A backend method whose lost connection becomes StoreUnavailable naming the server."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with reported(self.target.where, method.__name__):
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


# -- blocking waits ---------------------------------------------------------------------


@dataclass(frozen=True)
class WakeGroup:
    """Wake lists that one BLPOP can watch (one server; one slot on a cluster)."""

    ident: tuple[Any, ...]
    keys: tuple[str, ...]
    connect: Callable[[], Any]  # a dedicated connection to the server holding them


@dataclass
class _Blocked:
    group: WakeGroup
    conn: Any
    pending: bool = False
    fresh: bool = True  # its BLPOP was sent during the current wait


class Waiter:
    """Blocks on the wake lists of several servers at once, without threads.

    Each group has its own connection; a BLPOP is sent on each and the sockets are
    watched with select() until one answers or the deadline passes. A BLPOP still
    pending at the deadline stays pending: if it takes a token meanwhile, the next
    wait returns at once, so no wake-up is ever lost. If its server restarted
    meanwhile, that connection is replaced once, quietly.
    """

    def __init__(self) -> None:
        self._blocked: dict[tuple[Any, ...], _Blocked] = {}
        self._pid = os.getpid()

    def wait(self, groups: Sequence[WakeGroup], timeout: float) -> bool:
        """True when woken by a token, False at the deadline."""
        if self._pid != os.getpid():  # forked: the parent's sockets are not ours to read
            self._blocked, self._pid = {}, os.getpid()
        deadline = time.monotonic() + timeout
        watched = [self._get(group) for group in groups]
        for blocked in watched:
            blocked.fresh = not blocked.pending
        try:
            while True:
                remaining = deadline - time.monotonic()
                for blocked in watched:
                    if not blocked.pending:
                        # The deadline is kept by select() below: Redis checks blocking
                        # timeouts only ~10 times a second. The server's timeout ends a
                        # BLPOP left pending soon after, so that it does not take wake
                        # tokens other idle workers should get (0 would mean forever).
                        blocked.conn.send_command("BLPOP", *blocked.group.keys, round(max(remaining, 0.01), 3))
                        blocked.pending = True
                ready = [b for b in watched if b.conn.can_read(timeout=0)]
                if not ready:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    socks = {b.conn._sock: b for b in watched}
                    readable, _, _ = select.select(list(socks), [], [], remaining)
                    ready = [socks[s] for s in readable]
                woken = False
                for blocked in ready:
                    woken = self._read(blocked) or woken
                if woken:
                    return True
        except BaseException:
            self.reset()
            raise

    def _get(self, group: WakeGroup) -> _Blocked:
        blocked = self._blocked.get(group.ident)
        if blocked is None:
            blocked = self._blocked[group.ident] = _Blocked(group, group.connect())
        return blocked

    @staticmethod
    def _read(blocked: _Blocked) -> bool:
        try:
            reply = blocked.conn.read_response()
        except LOST:
            if blocked.fresh:
                raise
            blocked.conn.disconnect()  # sent before a server restart: start over once
            blocked.fresh = True
            reply = None
        blocked.pending = False
        return reply is not None

    def reset(self) -> None:
        for blocked in self._blocked.values():
            try:
                blocked.conn.disconnect()
            except Exception:  # noqa: BLE001 - already broken
                pass
        self._blocked.clear()
