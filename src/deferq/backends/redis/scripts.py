"""The Lua scripts (lua/*.lua, one per atomic operation) and how to run them.

A `Call` describes one script invocation (script, KEYS, ARGV) independently of the
client; `run`/`run_many` execute calls on a sync client and `arun` on an asyncio
client, so each operation is described once for both (DESIGN.md, "sync and async").
Scripts run by SHA (EVALSHA); a server that does not know one yet (just started,
or restarted) gets the source once, which also caches it there.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import weakref
from collections.abc import Callable
from importlib import resources
from typing import Any, NamedTuple

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ... import forks

_pack: Callable[[tuple[Any, ...]], bytes] | None
try:  # hiredis packs a command in C, twice as fast as redis-py's encoder
    from hiredis import pack_command as _pack
except ImportError:  # pragma: no cover - hiredis is part of the redis extra
    _pack = None

_LUA = resources.files(__package__) / "lua"
# _lib.lua: helper functions separated by blank lines, each defined before its users
_HELPERS = {
    match.group(1): block
    for block in (_LUA / "_lib.lua").read_text().split("\n\n")
    if (match := re.search(r"^local function (\w+)\(", block, re.MULTILINE))
}


class Script:
    """One script: lua/<name>.lua behind the helpers it uses. Its text is read and its
    SHA made at its first use, not at import: a worker runs a handful of the ~40, and
    the others' texts (~130 KB in all) would sit in every process's memory."""

    __slots__ = ("name", "_source", "_sha")

    def __init__(self, name: str) -> None:
        self.name = name
        self._source: str | None = None
        self._sha: str | None = None

    @property
    def source(self) -> str:
        if self._source is None:
            body = (_LUA / f"{self.name}.lua").read_text()
            self._source = _helpers_for(body) + body
        return self._source

    @property
    def sha(self) -> str:
        if self._sha is None:
            self._sha = hashlib.sha1(self.source.encode()).hexdigest()
        return self._sha

    def __repr__(self) -> str:
        return f"Script({self.name!r})"


_CALLED = re.compile(r"\b(\w+)\(")


def _helpers_for(body: str) -> str:
    """The helpers a script uses, and theirs: Redis re-creates every function a
    script defines on each call, so unused helpers would cost time per call. Each text
    is scanned once for the names it calls (a search per helper name took ~0.3 s of
    every process's start)."""
    used: set[str] = set()
    unread = [body]
    while unread:
        for name in _CALLED.findall(unread.pop()):
            if name in _HELPERS and name not in used:
                used.add(name)
                unread.append(_HELPERS[name])
    return "".join(_HELPERS[n] + "\n\n" for n in _HELPERS if n in used)


ADD, ENQUEUE, RESERVE, HEARTBEAT, SETTLE, RECOVER, NEXT_DUE = map(
    Script, ("add", "enqueue", "reserve", "heartbeat", "settle", "recover", "next_due")
)
CANCEL, RERUN, RUN_NOW, PURGE, STATS, WAKE = map(
    Script, ("cancel", "rerun", "run_now", "purge", "stats", "wake"))
KV_PUT, KV_LIST, KV_DELETE, KV_SWAP, KV_EXPIRE, KV_PUT_LEASED = map(
    Script, ("kv_put", "kv_list", "kv_delete", "kv_swap", "kv_expire", "kv_put_leased"))
PROGRESS, STEP_UP, PAUSE, REMARK, DELETE, RESEAL = map(
    Script, ("progress", "step_up", "pause", "remark", "delete", "reseal"))
RATE_TAKE, SLOT_TAKE, SLOT_HOLDERS, SLOT_RELEASE, LIMIT_HOLD, LIMIT_RELEASE = map(
    Script, ("rate_take", "slot_take", "slot_holders", "slot_release", "limit_hold", "limit_release")
)
HISTORY_ADD, HISTORY_READ, HISTORY_FORGET, PAGE = map(
    Script, ("history_add", "history_read", "history_forget", "page"))
LINK, LINKED, RELEASE, RELEASED, WATCH = map(Script, ("link", "linked", "release", "released", "watch"))


class Call(NamedTuple):
    """One script invocation (a tuple: made on every store call, a frozen dataclass's
    checked field writes would cost a microsecond)."""

    script: Script
    keys: list[str]
    args: list[Any]

    def evalsha(self) -> tuple[Any, ...]:
        return ("EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.args)

    def eval(self) -> tuple[Any, ...]:
        return ("EVAL", self.script.source, len(self.keys), *self.keys, *self.args)


def run(client: Any, call: Call) -> Any:
    try:
        return client.execute_command(*call.evalsha())
    except NoScriptError:
        return client.execute_command(*call.eval())


async def arun(client: Any, call: Call) -> Any:
    try:
        return await client.execute_command(*call.evalsha())
    except NoScriptError:
        return await client.execute_command(*call.eval())


def run_pipelined(client: Any, calls: list[Call]) -> list[Any]:
    """Several calls in one round trip (single server). Calls the server did not know
    the script of ran nothing, so they are simply run again with the source."""
    pipe = client.pipeline(transaction=False)
    for call in calls:
        pipe.execute_command(*call.evalsha())
    results: list[Any] = pipe.execute(raise_on_error=False)
    for i, result in enumerate(results):
        if isinstance(result, NoScriptError):
            results[i] = client.execute_command(*calls[i].eval())
        elif isinstance(result, Exception):
            raise result
    return results


class DirectLane:
    """Script calls straight on connections of the lane's own (single server).

    redis-py's command path (a pool checkout that probes the socket, retry and
    metrics wrappers) costs more client time than a short script takes on the
    server; the enqueue hot path goes around it. Same behaviour as the client: one
    retry on a fresh connection when the old one died (e.g. Redis restarted).

    A call borrows an idle connection and gives it back, so the lane holds as many
    as calls ran at once, whichever threads made them: a thread that lives for one
    burst of work (the progress writer's, a web server's) leaves no socket behind.
    The connections are made apart from redis-py's pool (`unpooled`): they never
    count against its `max_connections`.
    """

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self._idle: list[Any] = []
        self._all: weakref.WeakSet[Any] = weakref.WeakSet()
        self._pid = forks.pid

    def _borrow(self) -> Any:
        if self._pid != forks.pid:  # forked: never share the parent's sockets
            self._idle, self._all, self._pid = [], weakref.WeakSet(), forks.pid
        try:
            return self._idle.pop()  # atomic under the GIL, as append() is
        except IndexError:
            conn = unpooled(self.pool)
            self._all.add(conn)
            return conn

    def _give_back(self, conn: Any) -> None:
        if self._pid == forks.pid:
            self._idle.append(conn)

    def open_connections(self) -> int:
        """How many connections the lane holds (idle or in a call)."""
        return len(self._all)

    def run(self, call: Call) -> Any:
        conn = self._borrow()
        try:
            return self._run_on(conn, _packed(conn, call.evalsha()), call.eval)
        finally:
            self._give_back(conn)

    def run_packed(self, packed: list[bytes], source: Callable[[], tuple[Any, ...]]) -> Any:
        """A script call packed by its caller (an EVALSHA, in parts); `source()` gives it as
        an EVAL, for a server that does not know the script yet."""
        conn = self._borrow()
        try:
            return self._run_on(conn, packed, source)
        finally:
            self._give_back(conn)

    def _run_on(self, conn: Any, packed: Any, source: Callable[[], tuple[Any, ...]]) -> Any:
        for attempt in (1, 2):
            try:
                conn.send_packed_command(packed, check_health=False)
                try:
                    return conn.read_response()
                except NoScriptError:
                    conn.send_packed_command(_packed(conn, source()), check_health=False)
                    return conn.read_response()
            except ResponseError:
                raise  # the reply was read: the connection is still in step
            except (RedisConnectionError, RedisTimeoutError, OSError):
                conn.disconnect()
                if attempt == 2:
                    raise
            except BaseException:
                conn.disconnect()  # interrupted mid-reply: never reuse it
                raise
        raise AssertionError("unreachable")

    def run_many(self, calls: list[Call]) -> list[Any]:
        """Several calls in one round trip on this thread's connection."""
        conn = self._borrow()
        try:
            conn.send_packed_command(
                [part for call in calls for part in _packed(conn, call.evalsha())],
                check_health=False,
            )
            replies = []
            for _ in calls:
                try:
                    replies.append(conn.read_response())
                except (NoScriptError, ResponseError) as exc:
                    replies.append(exc)  # read every reply, so the connection stays in step
        except BaseException:
            conn.disconnect()
            raise
        finally:
            self._give_back(conn)
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                replies[i] = self.run(calls[i])  # it ran nothing: run it with its source
            elif isinstance(reply, Exception):
                raise reply
        return replies

    def close(self) -> None:
        for conn in list(self._all):
            conn.disconnect()


class AsyncLane:
    """Script calls for one event loop, as DirectLane makes them for threads: packed by
    hiredis and sent on connections of the lane's own, past redis.asyncio's command path
    (its encoder in Python, a task per write for the write's timeout, its metrics
    hooks): `enqueue_async` 278-301 -> 231-255 µs a call here. A call has one
    deadline, the client's socket timeout, for its write and its reply together; one
    retry on a fresh connection when the old one died, as the client. At most the
    pool's `max_connections` calls at once (redis-py's 100 by default): more wait for a
    connection (redis.asyncio's own pool refuses them: "Too many connections")."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool  # redis.asyncio's: makes the connections, holds none of them
        self.timeout: float | None = pool.connection_kwargs.get("socket_timeout")
        self._idle: list[Any] = []
        self._slots = asyncio.Semaphore(pool.max_connections)

    def _connection(self) -> Any:
        if self._idle:
            return self._idle.pop()
        return self.pool.connection_class(**{**self.pool.connection_kwargs, "socket_timeout": None})

    async def run(self, call: Call) -> Any:
        return await self.command(call.evalsha(), call.eval())

    async def command(self, command: tuple[Any, ...], source: tuple[Any, ...] | None = None) -> Any:
        """One command; `source`: what to send instead when the server answers that it
        does not know the script (EVAL for an EVALSHA)."""
        async with self._slots:
            conn = self._connection()
            for attempt in (1, 2):
                try:
                    async with asyncio.timeout(self.timeout):
                        reply = await self._send(conn, command, source)
                except ResponseError:
                    self._idle.append(conn)  # the reply was read: the connection is still in step
                    raise
                except (RedisConnectionError, RedisTimeoutError, OSError):  # TimeoutError is an OSError
                    await conn.disconnect(nowait=True)
                    if attempt == 2:
                        raise
                    continue
                except BaseException:
                    await conn.disconnect(nowait=True)  # cancelled mid-reply: never reuse it
                    raise
                self._idle.append(conn)
                return reply
        raise AssertionError("unreachable")

    @staticmethod
    async def _send(conn: Any, command: tuple[Any, ...], source: tuple[Any, ...] | None) -> Any:
        await conn.send_packed_command(_packed(conn, command), check_health=False)
        try:
            return await conn.read_response()
        except NoScriptError:
            if source is None:
                raise
            await conn.send_packed_command(_packed(conn, source), check_health=False)
            return await conn.read_response()


def packed_head(call: Call, more: int) -> bytes:
    """`call` as the start of an EVALSHA in the wire format (RESP), `more` arguments still
    to come, each appended as `packed_arg` makes it: the part that a run of calls
    shares, packed once."""
    command = call.evalsha()
    return b"*%d\r\n" % (len(command) + more) + b"".join(
        packed_arg(arg if isinstance(arg, bytes) else str(arg).encode()) for arg in command)


def packed_arg(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def _packed(conn: Any, command: tuple[Any, ...]) -> Any:
    """`command` as bytes to send on `conn` (either lane's), packed by hiredis when it is there."""
    return [_pack(command)] if _pack is not None else conn.pack_command(*command)


def unpooled(pool: Any) -> Any:
    """A new connection with `pool`'s settings that the pool does not count: redis-py
    counts every connection it makes against `max_connections` (100 by default since
    redis-py 7) until it is released to the pool, which a connection kept by its user
    never is."""
    return pool.connection_class(**pool.connection_kwargs)
