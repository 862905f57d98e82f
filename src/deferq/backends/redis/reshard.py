"""Changing a redis+shards:// store's servers at run time: add one, drain one (it takes no
new jobs; its workers finish what it holds), put a drained one back, remove a drained
one once it holds no unfinished job. Each change is a new version of the topology
record (topology.py), written on the first anchor first, which decides between two
admins changing it at once, then on the other anchors; who made it and when are logged.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ...errors import ConfigError, DeferqError, StoreUnavailable
from ...job import UNFINISHED_STATES
from .backend import RedisBackend
from .shards import MAX_SHARDS, ShardedRedisBackend
from .topology import DRAINING, LIVE, NAMESPACE, REFRESH, REMOVED, Added, Topology, check_server, server_name

CLAIM_KEPT = 7 * 86400.0  # seconds a version's claim is kept (only the next one is ever contended)
SETTLE = 2 * REFRESH  # a drained shard is removable after every process has seen it drain


class TopologyRefused(DeferqError):
    """A change to a store's shards that cannot be made (the message says why)."""


def sharded(backend: object) -> ShardedRedisBackend:
    if not isinstance(backend, ShardedRedisBackend):
        raise TopologyRefused("only a redis+shards:// store has shards to add, drain or remove")
    return backend


def unfinished(shard: RedisBackend) -> int:
    """Jobs on one server that have not ended (waiting, blocked or running)."""
    return sum(count for stats in shard.stats().values() for state, count in stats.counts.items()
               if state in UNFINISHED_STATES)


def describe(backend: ShardedRedisBackend) -> dict[str, Any]:
    """Every shard (anchors first) with its state, and the log of changes, newest last."""
    backend.sync(force=True)
    added = {a.number: a for a in backend.topology_seen.added}
    shards = [{"number": n, "name": backend.name(n), "role": "anchor" if n < backend.anchors else "added",
               "state": state, "since": added[n].since if n in added else None}
              for n, state in enumerate(backend.state)]
    return {"version": backend.topology_seen.version, "shards": shards,
            "log": [asdict(change) for change in backend.topology_seen.log]}


def _current(backend: ShardedRedisBackend) -> Topology:
    """The newest record; the first anchor must answer (it decides between writers)."""
    backend.shards[0].ping()
    return backend.newest_topology()


def _write(backend: ShardedRedisBackend, change: Any) -> dict[str, Any]:
    """`change(current, now)` -> the next version, written if no other change won the
    race for that version number (then the newer record is read and `change` asked again)."""
    first = backend.shards[0]
    for _ in range(10):
        current = _current(backend)
        following = first.kv_get(NAMESPACE, f"v{current.version + 1}")
        if following is not None:  # a writer stopped between its claim and the pointer
            current = Topology.decode(following)
            first.kv_put(NAMESPACE, "current", following)
        nxt: Topology = change(current, first.now())
        if first.kv_put(NAMESPACE, f"v{nxt.version}", nxt.encode(), CLAIM_KEPT, only_new=True):
            for anchor in backend.shards[: backend.anchors]:
                try:
                    anchor.kv_put(NAMESPACE, "current", nxt.encode())
                except StoreUnavailable:
                    if anchor is first:
                        raise
            backend.sync(force=True)
            return describe(backend)
    raise TopologyRefused("the shards kept changing under this change: try again")


def _find(backend: ShardedRedisBackend, current: Topology, name: str) -> Added:
    for added in current.added:
        if added.state != REMOVED and (server_name(added.server) == name or str(added.number) == name):
            return added
    anchors = {backend.name(n) for n in range(backend.anchors)}
    if name in anchors or (name.isdigit() and int(name) < backend.anchors):
        raise TopologyRefused(f"{name} is named in the URL (an anchor: unique keys and records live there): "
                              "it cannot be drained or removed")
    raise TopologyRefused(f"no shard {name} in the set")


def _refuse_present(backend: ShardedRedisBackend, current: Topology, name: str) -> None:
    names = {backend.name(n) for n in range(backend.anchors)}
    names |= {server_name(a.server) for a in current.added if a.state != REMOVED}
    if name in names:
        raise TopologyRefused(f"{name} is already a shard of this store")


def add_shard(backend: ShardedRedisBackend, server: str, who: str) -> dict[str, Any]:
    """A new server taking new jobs; refused when it does not answer, is already in the
    set, or already holds jobs under this store's prefix."""
    server = check_server(server)
    name = server_name(server)
    _refuse_present(backend, _current(backend), name)
    probe = RedisBackend(backend.server_url(server), **backend._options)
    try:
        probe.ping()
        held = sum(sum(s.counts.values()) for s in probe.stats().values())
    finally:
        probe.close()
    if held:
        raise TopologyRefused(f"{name} already holds {held} jobs under this store's prefix: add an empty server")

    def change(current: Topology, now: float) -> Topology:
        _refuse_present(backend, current, name)
        number = backend.anchors + len(current.added)
        if number >= MAX_SHARDS:
            raise ConfigError(f"a store has at most {MAX_SHARDS} shards over its life")
        return current.changed(who, "add", name, now, (*current.added, Added(number, server, LIVE, now)))

    return _write(backend, change)


def drain_shard(backend: ShardedRedisBackend, name: str, who: str, drain: bool = True) -> dict[str, Any]:
    """No new jobs for an added shard (its jobs still run), or (drain=False) new jobs again."""
    def change(current: Topology, now: float) -> Topology:
        added = _find(backend, current, name)
        state = DRAINING if drain else LIVE
        if added.state == state:
            raise TopologyRefused(f"{server_name(added.server)} is already {state}")
        action = "drain" if drain else "undrain"
        states = current.with_state(added.number, state, now)
        return current.changed(who, action, server_name(added.server), now, states)

    return _write(backend, change)


def remove_shard(backend: ShardedRedisBackend, name: str, who: str) -> dict[str, Any]:
    """An added shard out of the set: only once drained (for long enough that every
    process has stopped sending it jobs) and holding no unfinished job."""
    def change(current: Topology, now: float) -> Topology:
        added = _find(backend, current, name)
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

    return _write(backend, change)
