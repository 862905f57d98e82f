"""Changing a redis+shards:// store's servers at run time: add one, drain one (it takes no
new jobs; its workers finish what it holds), put a drained one back, remove a drained
one once it holds no unfinished job. Each change is a new version of the topology
record (topology.py), written on the first anchor first, which decides between two
admins changing it at once, then on the other anchors; who made it and when are logged.
The sharded store hands it out as its `resharding()` (base.Resharding), so the API and
the command line change shards without knowing the store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any, Protocol

from ...errors import ConfigError, StoreUnavailable
from ...job import MARKS, UNFINISHED_STATES
from ..base import Resharding, TopologyRefused
from .backend import RedisBackend
from .topology import DRAINING, LIVE, NAMESPACE, REFRESH, REMOVED, Added, Topology, check_server, server_name

CLAIM_KEPT = 7 * 86400.0  # seconds a version's claim is kept (only the next one is ever contended)
SETTLE = 2 * REFRESH  # a drained shard is removable after every process has seen it drain

__all__ = ["Shards", "TopologyRefused"]


class Sharded(Protocol):
    """What changing the servers reads of the sharded store (shards.ShardedRedisBackend)."""

    shards: list[RedisBackend]
    anchors: int  # the URL's servers: numbers 0 to anchors - 1
    state: list[str]  # per shard number: live, draining or removed
    topology_seen: Topology

    def name(self, shard: int) -> str: ...
    def sync(self, force: bool = False, max_age: float = REFRESH) -> None: ...
    def newest_topology(self, skip_down: bool = False) -> Topology: ...
    def open_server(self, server: str) -> RedisBackend: ...


def unfinished(shard: RedisBackend) -> int:
    """Jobs on one server that have not ended (waiting, blocked or running)."""
    return sum(count for stats in shard.stats().values() for state, count in stats.counts.items()
               if state in UNFINISHED_STATES)


class Shards(Resharding):
    """The servers of one sharded store, changed at run time."""

    def __init__(self, backend: Sharded) -> None:
        self.backend = backend

    def describe(self) -> dict[str, Any]:
        backend = self.backend
        backend.sync(force=True)
        added = {a.number: a for a in backend.topology_seen.added}
        shards = [{"number": n, "name": backend.name(n), "role": "anchor" if n < backend.anchors else "added",
                   "state": state, "since": added[n].since if n in added else None}
                  for n, state in enumerate(backend.state)]
        return {"version": backend.topology_seen.version, "shards": shards,
                "log": [asdict(change) for change in backend.topology_seen.log]}

    def add(self, server: str, who: str) -> dict[str, Any]:
        """A new server taking new jobs; refused when it does not answer, is already in the
        set, or already holds jobs under this store's prefix."""
        backend, server = self.backend, check_server(server)
        name = server_name(server)
        self._refuse_present(self._current(), name)
        probe = backend.open_server(server)
        try:
            probe.ping()
            held = sum(sum(s.counts.values()) for s in probe.stats().values())
        finally:
            probe.close()
        if held:
            raise TopologyRefused(f"{name} already holds {held} jobs under this store's prefix: "
                                  "add an empty server")

        def change(current: Topology, now: float) -> Topology:
            self._refuse_present(current, name)
            number = backend.anchors + len(current.added)
            if number >= MARKS:  # a job id carries its shard's number (job.mark_id)
                raise ConfigError(f"a store has at most {MARKS} shards over its life")
            return current.changed(who, "add", name, now, (*current.added, Added(number, server, LIVE, now)))

        return self._write(change)

    def drain(self, name: str, who: str, drain: bool = True) -> dict[str, Any]:
        """No new jobs for an added shard (its jobs still run), or (drain=False) new jobs again."""
        def change(current: Topology, now: float) -> Topology:
            added = self._find(current, name)
            state = DRAINING if drain else LIVE
            if added.state == state:
                raise TopologyRefused(f"{server_name(added.server)} is already {state}")
            action = "drain" if drain else "undrain"
            states = current.with_state(added.number, state, now)
            return current.changed(who, action, server_name(added.server), now, states)

        return self._write(change)

    def remove(self, name: str, who: str) -> dict[str, Any]:
        """An added shard out of the set: only once drained (for long enough that every
        process has stopped sending it jobs) and holding no unfinished job."""
        backend = self.backend

        def change(current: Topology, now: float) -> Topology:
            added = self._find(current, name)
            server = server_name(added.server)
            if added.state != DRAINING:
                raise TopologyRefused(f"{server} is live: drain it first, then remove it once its jobs have run")
            backend.sync(force=True)
            left = unfinished(backend.shards[added.number])
            if left:
                raise TopologyRefused(f"{server} still holds {left} unfinished jobs: let them run, or cancel them")
            if now - added.since < SETTLE:
                raise TopologyRefused(f"{server} began draining {now - added.since:.1f}s ago: wait {SETTLE:.0f}s "
                                      "so that every process has stopped sending it jobs")
            return current.changed(who, "remove", server_name(added.server), now,
                                   current.with_state(added.number, REMOVED, now))

        return self._write(change)

    def _current(self) -> Topology:
        """The newest record; the first anchor must answer (it decides between writers)."""
        self.backend.shards[0].ping()
        return self.backend.newest_topology()

    def _write(self, change: Callable[[Topology, float], Topology]) -> dict[str, Any]:
        """`change(current, now)` -> the next version, written if no other change won the
        race for that version number (then the newer record is read and `change` asked again)."""
        backend = self.backend
        first = backend.shards[0]
        for _ in range(10):
            current = self._current()
            following = first.kv_get(NAMESPACE, f"v{current.version + 1}")
            if following is not None:  # a writer stopped between its claim and the pointer
                current = Topology.decode(following)
                first.kv_put(NAMESPACE, "current", following)
            nxt = change(current, first.now())
            if first.kv_put(NAMESPACE, f"v{nxt.version}", nxt.encode(), CLAIM_KEPT, only_new=True):
                for anchor in backend.shards[: backend.anchors]:
                    try:
                        anchor.kv_put(NAMESPACE, "current", nxt.encode())
                    except StoreUnavailable:
                        if anchor is first:
                            raise
                return self.describe()
        raise TopologyRefused("the shards kept changing under this change: try again")

    def _find(self, current: Topology, name: str) -> Added:
        anchors = self.backend.anchors
        for added in current.added:
            if added.state != REMOVED and (server_name(added.server) == name or str(added.number) == name):
                return added
        if name in {self.backend.name(n) for n in range(anchors)} or (name.isdigit() and int(name) < anchors):
            raise TopologyRefused(f"{name} is named in the URL (an anchor: unique keys and records live there): "
                                  "it cannot be drained or removed")
        raise TopologyRefused(f"no shard {name} in the set")

    def _refuse_present(self, current: Topology, name: str) -> None:
        names = {self.backend.name(n) for n in range(self.backend.anchors)}
        names |= {server_name(a.server) for a in current.added if a.state != REMOVED}
        if name in names:
            raise TopologyRefused(f"{name} is already a shard of this store")
