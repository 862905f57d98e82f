"""The shards of a redis+shards:// store that were added at run time, and their log.

The servers named in the URL are the *anchors*: always there, always taking new jobs,
and the only servers unique keys and kv records are routed over (so a key's server
never changes when a shard comes or goes). Servers added later are listed in one
versioned record, kept on every anchor; each process re-reads it every `REFRESH`
seconds, so producers, workers and servers follow a change without a restart.

An added shard is `live` (takes new jobs), `draining` (takes none; its jobs still run
and are still read) or `removed` (no longer asked; refused while it holds unfinished
jobs). Its number (the one its jobs' ids are marked with, job.mark_id) is never
given to another server, even once it is removed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ...errors import ConfigError

REFRESH = 2.0  # seconds between two reads of the record by one process
LOG_KEPT = 100  # changes kept in the record, newest last
NAMESPACE = "shard-topology"  # the kv namespace of the record on each anchor
LIVE, DRAINING, REMOVED = "live", "draining", "removed"


@dataclass(frozen=True)
class Added:
    number: int  # the shard number its jobs' ids are marked with
    server: str  # [[user]:password@]host:port[/db], as given
    state: str = LIVE
    since: float = 0.0  # when it got its state


@dataclass(frozen=True)
class Change:
    at: float
    who: str
    action: str  # add, drain, undrain, remove
    shard: str  # host:port/db


@dataclass(frozen=True)
class Topology:
    version: int = 0
    added: tuple[Added, ...] = ()
    log: tuple[Change, ...] = field(default=())

    def encode(self) -> bytes:
        return json.dumps({"version": self.version, "added": [asdict(a) for a in self.added],
                           "log": [asdict(c) for c in self.log]}).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> Topology:
        if raw is None:
            return cls()
        data: dict[str, Any] = json.loads(raw)
        return cls(int(data["version"]), tuple(Added(**a) for a in data["added"]),
                   tuple(Change(**c) for c in data["log"]))

    def changed(self, who: str, action: str, shard: str, now: float, added: tuple[Added, ...]) -> Topology:
        log = (*self.log, Change(now, who, action, shard))[-LOG_KEPT:]
        return Topology(self.version + 1, added, log)

    def with_state(self, number: int, state: str, now: float) -> tuple[Added, ...]:
        return tuple(replace(a, state=state, since=now) if a.number == number else a for a in self.added)


def server_name(server: str) -> str:
    """host:port/db of a server part (its password left out), as shards are named."""
    where = server.rpartition("@")[2]
    host, _, db = where.partition("/")
    return f"{host}/{db or '0'}"


def check_server(server: str) -> str:
    """A server part as the URL takes one, stripped; a clear error for anything else."""
    server = server.strip()
    host = server.rpartition("@")[2].partition("/")[0]
    if not server or "," in server or "?" in server or "://" in server or ":" not in host:
        raise ConfigError(f"{server!r} is not a Redis server: give host:port[/db], as in the URL (no scheme)")
    db = server.rpartition("@")[2].partition("/")[2]
    if db and not db.isdigit():
        raise ConfigError(f"{server!r}: the database after / must be a number")
    return server
