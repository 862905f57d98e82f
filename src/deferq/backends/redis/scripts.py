"""The Lua scripts (lua/*.lua, one per atomic operation) and how to run them.

A `Call` describes one script invocation (script, KEYS, ARGV) independently of the
client; `run`/`run_many` execute calls on a sync client and `arun` on an asyncio
client, so each operation is described once for both (DESIGN.md, "sync and async").
Scripts run by SHA (EVALSHA); a server that does not know one yet (just started,
or restarted) gets the source once, which also caches it there.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError

_LUA = resources.files(__package__) / "lua"
_LIB = (_LUA / "_lib.lua").read_text()


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str


def _load(name: str) -> Script:
    source = _LIB + "\n" + (_LUA / f"{name}.lua").read_text()
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())


ENQUEUE, RESERVE, HEARTBEAT, SETTLE, RECOVER, NEXT_DUE = map(
    _load, ("enqueue", "reserve", "heartbeat", "settle", "recover", "next_due")
)
CANCEL, RETRY_DEAD, PURGE, STATS = map(_load, ("cancel", "retry_dead", "purge", "stats"))
KV_PUT, KV_LIST, KV_DELETE = map(_load, ("kv_put", "kv_list", "kv_delete"))


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
    results = pipe.execute(raise_on_error=False)
    for i, result in enumerate(results):
        if isinstance(result, NoScriptError):
            results[i] = client.execute_command(*calls[i].eval())
        elif isinstance(result, Exception):
            raise result
    return results
