"""The upkeep leader: one process at a time, elected through the store.

The lease is the record ``leases/upkeep``: taken when absent or expired
(`kv_put(only_new=True)`), renewed by its holder with `kv_swap` (a compare-and-set), so
of many processes one leads, on every store. When the leader stops cleanly it gives the
lease up and another takes over at once; when it dies (SIGKILL, a lost machine) another
takes over once the lease has run out: within the lease plus one follower poll (a fifth
of it).

Leading is a matter of time, not a lock: a leader frozen past its lease (a GC pause, a
suspended VM) may wake still believing it leads. So what the leader does must stay right
when done twice: each sweep is atomic in the store, and each schedule tick is claimed
by a compare-and-set of its own (schedules/firing.py).
"""

from __future__ import annotations

from typing import Any

import orjson

LEASE_NAMESPACE, LEASE_KEY = "leases", "upkeep"
LEASE = 10.0  # seconds a leader holds the lease without renewing it (at most: the App's lease if shorter)


class Leader:
    """The leader lease, held by `holder` (this process's name)."""

    def __init__(self, backend: Any, holder: str, lease: float = LEASE) -> None:
        self.backend, self.holder, self.lease = backend, holder, lease
        self.renewals = 0

    def hold(self) -> bool:
        """Take the lease if it is free, renew it if it is ours; say whether we lead."""
        current = self.backend.kv_get(LEASE_NAMESPACE, LEASE_KEY)
        mine = orjson.dumps({"holder": self.holder, "n": self.renewals + 1})
        if current is None:
            held = self.backend.kv_put(LEASE_NAMESPACE, LEASE_KEY, mine, ttl=self.lease, only_new=True)
        elif orjson.loads(current).get("holder") in (self.holder, None):  # ours, or given up
            held = self.backend.kv_swap(LEASE_NAMESPACE, LEASE_KEY, current, mine, ttl=self.lease)
        else:
            return False
        if held:
            self.renewals += 1
        return bool(held)

    def release(self) -> None:
        """Give the lease up now (a clean stop), so another process takes over at once."""
        current = self.backend.kv_get(LEASE_NAMESPACE, LEASE_KEY)
        if current is not None and orjson.loads(current).get("holder") == self.holder:
            self.backend.kv_swap(LEASE_NAMESPACE, LEASE_KEY, current, b"{}", ttl=self.lease)


def current_leader(backend: Any) -> str | None:
    """Who holds the leader lease now (None: no process does upkeep, nor fires schedules)."""
    current = backend.kv_get(LEASE_NAMESPACE, LEASE_KEY)
    holder = orjson.loads(current).get("holder") if current else None
    return holder if isinstance(holder, str) else None
