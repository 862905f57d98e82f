"""Redis clients from a URL, one sentence for each way a store call fails, and blocking waits.

URLs: redis://[[user]:password@]host[:port][/db], rediss://... (TLS),
unix:///path/to/redis.sock[?db=N], redis+cluster://host:port[,host:port...].
deferq's own query option, `prefix=` (default "deferq"), is removed before the rest
of the query goes to redis-py (e.g. `socket_timeout=3`; backends/urls.py lists the options).

How a failure reaches the caller (`reported`, docs/redis.md "Errors"):
- the server is gone, loading, failing over: StoreUnavailable (retried by workers);
- out of memory: StoreFull (a StoreUnavailable: room can be made while deferq waits);
- wrong password, a database number the server lacks, an ACL that forbids a command:
  ConfigError, because only a change of the URL or of the server's setup fixes them.
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
from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    ClusterError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ...errors import ConfigError, DeferqError, StoreFull, StoreUnavailable
from .keys import DEFAULT_PREFIX

# Short connect timeout: a down server is reported in seconds, not minutes. One
# immediate retry: a pooled connection that died with a restarted server is replaced
# at once (every script is safe to run twice: enqueue writes the same id, the lease
# fence refuses a second settle).
CLIENT_DEFAULTS: dict[str, Any] = {"socket_connect_timeout": 2.0, "socket_timeout": 10.0}
F = TypeVar("F", bound=Callable[..., Any])
# A server that is gone, loading its data, failing over (read-only, cluster down,
# try again): all "not reachable right now", retried by the worker. (A refused password
# is a ConnectionError to redis-py too; `store_error` tells it apart first.)
LOST = (
    RedisConnectionError, RedisTimeoutError, RedisClusterException, ClusterError,
    TryAgainError, ReadOnlyError, OSError,
)


@dataclass
class Target:
    """What a URL names: where, under which prefix, and redis-py's own options."""

    url: str  # as given, without deferq's options
    where: str  # for messages: host:port or socket path
    prefix: str
    cluster: bool
    db: int = 0  # the database number the URL names


def parse_url(url: str) -> Target:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    prefix = query.pop("prefix", DEFAULT_PREFIX)
    cluster = parts.scheme == "redis+cluster"
    scheme = "redis" if cluster else parts.scheme
    db = parts.path.strip("/")
    if scheme in ("redis", "rediss") and db and not db.isdigit():
        raise ConfigError(f"the Redis URL {url!r} names database {db!r}: it must be a number, e.g. /0")
    if parts.scheme == "unix":
        db = query.get("db", "0")
    rest = f"?{urlencode(query)}" if query else ""
    clean = f"{scheme}://{parts.netloc}{parts.path}{rest}"  # urlunsplit drops unix:// slashes
    where = parts.path if parts.scheme == "unix" else (parts.netloc.rsplit("@", 1)[-1] or "localhost:6379")
    return Target(clean, where, prefix, cluster, int(db) if db.isdigit() else 0)


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
        failure = store_error(exc, target, "")
        if isinstance(failure, ConfigError):
            raise failure from None
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
def reported(target: Target, doing: str = "") -> Iterator[None]:
    """Turn redis-py's errors into deferq's, each one sentence naming the server."""
    try:
        yield
    except (redis.RedisError, OSError) as exc:
        failure = translated(exc, target, doing)
        if failure is None:
            raise
        raise failure from None


def translated(exc: BaseException, target: Target, doing: str = "") -> BaseException | None:
    """deferq's error for what redis-py or the socket raised, or None to let it go up."""
    if isinstance(exc, redis.RedisError):
        return store_error(exc, target, doing)
    if isinstance(exc, OSError):
        return _unreachable(exc, target, doing)
    return None


def store_error(exc: BaseException, target: Target, doing: str = "") -> DeferqError | None:
    """deferq's error for a redis-py error, or None for one that is a bug (e.g. a script
    error), which goes up unchanged."""
    during = f" during {doing}" if doing else ""
    if isinstance(exc, (AuthenticationError, AuthenticationWrongNumberOfArgsError)):
        return ConfigError(_auth_failed(target, exc))
    if isinstance(exc, NoPermissionError):
        return ConfigError(
            f"Redis at {target.where} refused a command{during}: the URL's user lacks the permission "
            f"({_reason(exc)}); allow it in the server's ACL"
        )
    text = str(exc)
    if isinstance(exc, OutOfMemoryError) or "used memory > 'maxmemory'" in text:
        return StoreFull(
            f"Redis at {target.where} is out of memory{during} (used memory > maxmemory): it takes no "
            "new data until room is made (purge finished jobs, raise maxmemory)"
        )
    if isinstance(exc, LOST):
        return _unreachable(exc, target, doing)
    if isinstance(exc, ResponseError) and "DB index is out of range" in text:
        return ConfigError(_no_database(target))
    if isinstance(exc, ResponseError) and text.startswith("MISCONF"):
        return StoreUnavailable(f"Redis at {target.where} refuses writes{during}: {_reason(exc)}")
    return None


def _unreachable(exc: BaseException, target: Target, doing: str) -> StoreUnavailable:
    during = f" during {doing}" if doing else ""
    return StoreUnavailable(
        f"Redis at {target.where} cannot be reached{during} ({type(exc).__name__}: "
        f"{_reason(exc) or 'no answer'}); deferq retries when it returns"
    )


def _reason(exc: BaseException) -> str:
    """The first line of a server's or driver's message, without a trailing period."""
    lines = str(exc).strip().splitlines()
    return lines[0].rstrip(".") if lines else ""


def _auth_failed(target: Target, exc: BaseException) -> str:
    if urlsplit(target.url).password is None:
        why = "the server wants a password and the URL gives none"
    else:
        why = f"the server refused the URL's user and password ({_reason(exc)})"
    return (
        f"Redis at {target.where}: authentication failed: {why}; give them as redis://user:password@host:port/db"
    )


def _no_database(target: Target) -> str:
    count = _database_count(target)
    has = f" (it has {count}: 0 to {count - 1})" if count else ""
    return (
        f"Redis at {target.where}: database {target.db} does not exist on this server{has}; "
        "use another database number in the URL"
    )


def _database_count(target: Target) -> int | None:
    """How many databases the server has (CONFIG GET databases on database 0), or None
    when it will not say (CONFIG renamed, an ACL, a managed service)."""
    try:
        pool = redis.ConnectionPool.from_url(target.url, **CLIENT_DEFAULTS)
        conn = pool.connection_class(**{**pool.connection_kwargs, "db": 0})
        try:
            conn.send_command("CONFIG", "GET", "databases")
            reply = conn.read_response()
        finally:
            conn.disconnect()
        values = list(reply.values()) if isinstance(reply, dict) else reply[1::2]
        return int(values[0])
    except Exception:  # noqa: BLE001 - only a detail of another error's message
        return None


def guarded(method: F) -> F:
    """A backend method whose redis-py errors become deferq's, naming the server."""

    doing = method.__name__

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:  # as `reported` does, without a context manager per call (every enqueue, every claim)
            return method(self, *args, **kwargs)
        except (redis.RedisError, OSError) as exc:
            failure = translated(exc, self.target, doing)
            if failure is None:
                raise
            raise failure from None

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
    client_id: int | None = None  # the server's id of `conn` (CLIENT ID), for CLIENT UNBLOCK
    sock: Any = None  # the socket `client_id` belongs to (a reconnect gets another id)


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
        self._forget_if_forked()
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

    def wait_then(
        self, group: WakeGroup, timeout: float, command: tuple[Any, ...], unblock: Callable[[int], Any]
    ) -> tuple[bool, Any] | None:
        """BLPOP on one group's wake lists with `command` sent right behind it on the same
        connection: the server runs the command the moment the wait ends, so a wake-up
        and the command's answer come in one round trip. At the deadline the BLPOP is
        ended by `unblock(client id)` (CLIENT UNBLOCK; the server's own timeout may be
        ~100 ms late). Returns (woken, the command's reply or its error), or None when a
        BLPOP of an earlier `wait` is still pending here (then wait the plain way).

        If this call is interrupted after the server ran the command, its answer is
        lost with the connection: a lease taken by it expires and the job runs again."""
        self._forget_if_forked()
        blocked = self._get(group)
        if blocked.pending:
            return None
        for attempt in (1, 2):
            try:
                return self._blpop_then(blocked, timeout, command, unblock)
            except LOST:
                self.reset()  # a connection from before a server restart: once more, fresh
                if attempt == 2:
                    raise
                blocked = self._get(group)
            except BaseException:
                self.reset()
                raise
        raise AssertionError("unreachable")

    @staticmethod
    def _blpop_then(
        blocked: _Blocked, timeout: float, command: tuple[Any, ...], unblock: Callable[[int], Any]
    ) -> tuple[bool, Any]:
        conn = blocked.conn
        if conn._sock is None or blocked.sock is not conn._sock:
            conn.send_command("CLIENT", "ID")
            blocked.client_id, blocked.sock = conn.read_response(), conn._sock
        blpop = ("BLPOP", *blocked.group.keys, round(max(timeout, 0.01), 3))
        conn.send_packed_command(conn.pack_commands([blpop, command]), check_health=False)
        if not conn.can_read(timeout=max(timeout, 0)) and blocked.client_id is not None:
            try:
                unblock(blocked.client_id)
            except ResponseError:  # not allowed (an ACL): the server's own timeout ends it
                pass
        woken = conn.read_response() is not None
        try:
            reply = conn.read_response()
        except ResponseError as exc:  # the command's own error (NOSCRIPT): the caller's to handle
            reply = exc
        return woken, reply

    def _forget_if_forked(self) -> None:
        if self._pid != os.getpid():  # forked: the parent's sockets are not ours to read
            self._blocked, self._pid = {}, os.getpid()

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
