"""The Lua scripts (lua/*.lua, one per atomic operation) and how to run them.

A `Call` describes one script invocation (script, KEYS, ARGV) independently of the
client; `run`/`run_many` execute calls on a sync client and `arun` on an asyncio
client, so each operation is described once for both (DESIGN.md, "sync and async").
Scripts run by SHA (EVALSHA); a server that does not know one yet (just started,
or restarted) gets the source once, which also caches it there.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

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


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str


def _helpers_for(body: str) -> str:
    """The helpers a script uses, and theirs: Redis re-creates every function a
    script defines on each call, so unused helpers would cost time per call."""
    used: list[str] = []
    text = body
    while True:
        wanted = [n for n in _HELPERS if n not in used and re.search(rf"\b{n}\(", text)]
        if not wanted:
            break
        used += wanted
        text = body + "".join(_HELPERS[n] for n in used)
    return "".join(_HELPERS[n] + "\n\n" for n in _HELPERS if n in used)


def _load(name: str) -> Script:
    body = (_LUA / f"{name}.lua").read_text()
    source = _helpers_for(body) + body
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())


ADD, ENQUEUE, RESERVE, HEARTBEAT, SETTLE, RECOVER, NEXT_DUE = map(
    _load, ("add", "enqueue", "reserve", "heartbeat", "settle", "recover", "next_due")
)
CANCEL, RETRY_DEAD, PURGE, STATS = map(_load, ("cancel", "retry_dead", "purge", "stats"))
KV_PUT, KV_LIST, KV_DELETE = map(_load, ("kv_put", "kv_list", "kv_delete"))
PROGRESS, STEP_UP, PAUSE, REMARK, DELETE = map(_load, ("progress", "step_up", "pause", "remark", "delete"))
RATE_TAKE, SLOT_TAKE, SLOT_HOLDERS, SLOT_RELEASE = map(
    _load, ("rate_take", "slot_take", "slot_holders", "slot_release")
)
HISTORY_ADD, HISTORY_READ, PAGE = map(_load, ("history_add", "history_read", "page"))
LINK, LINKED, RELEASE, RELEASED, WATCH = map(_load, ("link", "linked", "release", "released", "watch"))


@dataclass(frozen=True, slots=True)
class Call:
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
    """Script calls straight on a connection of this thread's own (single server).

    redis-py's command path (a pool checkout that probes the socket, retry and
    metrics wrappers) costs more client time than a short script takes on the
    server; the enqueue hot path goes around it. Same behaviour as the client: one
    retry on a fresh connection when the old one died (e.g. Redis restarted).
    """

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self._local = threading.local()
        self._all: weakref.WeakSet[Any] = weakref.WeakSet()
        self._pid = os.getpid()

    def _connection(self) -> Any:
        if self._pid != os.getpid():  # forked: never share the parent's sockets
            self._local, self._pid = threading.local(), os.getpid()
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self.pool.make_connection()
            self._all.add(conn)
        return conn

    @staticmethod
    def _packed(conn: Any, command: tuple[Any, ...]) -> Any:
        return [_pack(command)] if _pack is not None else conn.pack_command(*command)

    def run(self, call: Call) -> Any:
        conn = self._connection()
        for attempt in (1, 2):
            try:
                conn.send_packed_command(self._packed(conn, call.evalsha()), check_health=False)
                try:
                    return conn.read_response()
                except NoScriptError:
                    conn.send_packed_command(self._packed(conn, call.eval()), check_health=False)
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
        conn = self._connection()
        try:
            conn.send_packed_command(
                [part for call in calls for part in self._packed(conn, call.evalsha())],
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
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                replies[i] = self.run(calls[i])  # it ran nothing: run it with its source
            elif isinstance(reply, Exception):
                raise reply
        return replies

    def close(self) -> None:
        for conn in list(self._all):
            conn.disconnect()
