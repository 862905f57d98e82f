"""Limits set, changed and cleared at run time, and pauses (`deferq.Backoff`).

Kept in the store, in the kv namespace "limits": `set|<name>` holds a limit's new value
(`{"rate": "50/s", "concurrency": 3}`), `pause|<name>` the store time a pause ends (the
record expires with it). `<name>` is a task's name, a limit key as a task's `rate_key`
or `concurrency_key` names it for one call ("customer:7"), or `queue:<queue>`: a limit
on every job of that queue, which holds beside the task's own (both must let it run).

Every worker reads the namespace again at most once a second (one `kv_list`, by the
first job that starts after the second is over; jobs starting meanwhile wait for it), so
a change holds on every worker within a second of being stored, and a worker pays one
store read a second for it. A
limit set on a key wins over one set on its task, which wins over the task's declared
one; clearing it gives the declared one back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from ..backends.guard import StoreGuard
from ..errors import ConfigError
from ..values import MAX_PAUSE, Rate, rate_option, slots, storable

if TYPE_CHECKING:
    from ..backends.base import Backend

log = logging.getLogger("deferq.limits")

NAMESPACE = "limits"
SET, PAUSE = "set|", "pause|"
REFRESH = 1.0  # seconds: how stale a worker's copy of the store's limits may be


@dataclass(frozen=True)
class Override:
    """A limit's value set at run time: a rate, a concurrency, or both. `since`: the store
    time its rate was set (kept while a new setting leaves the rate as it was), which
    names the rate's turns: a rate set again starts afresh, not behind the turns an
    earlier setting handed out."""

    rate: Rate | None = None
    concurrency: int | None = None
    since: float | None = None

    @property
    def turns(self) -> str:
        """What names this rate's turns after the key they are kept under."""
        return self.turns_of() or ""

    def turns_of(self) -> str | None:
        if self.rate is None:
            return None
        return f"@{self.rate.text}" + (f"@{self.since!r}" if self.since is not None else "")

    def to_dict(self) -> dict[str, Any]:
        return {"rate": self.rate.text if self.rate else None, "concurrency": self.concurrency}

    @classmethod
    def parse(cls, rate: Any = None, concurrency: Any = None) -> Override:
        """Checked values; ConfigError (one sentence) for a wrong one or for neither."""
        if rate is None and concurrency is None:
            raise ConfigError("a limit needs a rate (like \"50/s\"), a concurrency (like 3), or both")
        try:
            return cls(None if rate is None else rate_option(rate),
                       None if concurrency is None else slots(concurrency))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


NAME_LENGTH = 180  # the kv key, "pause|" in front, fits MySQL's 191 characters
QUEUE = "queue:"  # a name that starts so limits every job of a queue


def queue_limit(queue: str) -> str:
    """The name of the limit on every job of `queue`."""
    return QUEUE + queue


def limit_name(value: Any) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= NAME_LENGTH or not storable(value):
        raise ConfigError(f"a limit is named by a task, a limit key or queue:<queue>, of 1-{NAME_LENGTH} "
                          f"characters, got {value!r:.60}")
    if value == QUEUE:
        raise ConfigError('a queue\'s limit names its queue, like "queue:emails"')
    return value


def pause_seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_PAUSE:
        raise ConfigError(f"a pause lasts more than 0 and at most {MAX_PAUSE:g} seconds, got {value!r:.60}")
    return float(value)


class LimitsAdmin:
    """`app.limits`: the limits kept in the store, set, changed and cleared at run time.
    `changed`: told of each set or pause (the App's Limits middleware: busy from then on)."""

    def __init__(self, backend: Callable[[], Backend], changed: Callable[[], None] = lambda: None) -> None:
        self.backend = backend
        self.changed = changed

    def set(self, name: str, *, rate: str | Rate | None = None, concurrency: int | None = None) -> dict[str, Any]:
        """Set (or replace) the limit `name`: `rate="50/s"`, `concurrency=3`, or both. A
        rate that changes gives back at once the jobs waiting for turns `name`'s rate
        reserved: they take their turns again at the new one."""
        value, backend = Override.parse(rate, concurrency), self.backend()
        before = stored(backend, limit_name(name))
        kept = before is not None and before.rate == value.rate  # the same turns go on
        since = (before.since if before is not None and kept else backend.now()) if value.rate else None
        record = {**value.to_dict(), "since": since}
        backend.kv_put(NAMESPACE, SET + name, orjson.dumps(record))
        self.changed()
        if not kept:
            backend.limit_release(name)
        return value.to_dict()

    def clear(self, name: str) -> bool:
        """Drop the limit set on `name` and any pause of it, and give back at once the
        jobs either held; False: there was none."""
        backend = self.backend()
        cleared = backend.kv_delete(NAMESPACE, SET + limit_name(name))
        cleared = backend.kv_delete(NAMESPACE, PAUSE + name) or cleared
        if cleared:
            backend.limit_release(name)
        return cleared

    def pause(self, name: str, seconds: float) -> None:
        """No job under `name` starts for `seconds` (what `raise deferq.Backoff` does)."""
        pause(self.backend(), limit_name(name), pause_seconds(seconds))
        self.changed()

    def resume(self, name: str) -> bool:
        """End the pause of `name` now, keeping the limit set on it; False: it was not
        paused. Every worker lets its jobs start again within a second."""
        paused = (self.get(name) or {}).get("paused_for") is not None
        backend = self.backend()
        backend.kv_delete(NAMESPACE, PAUSE + name)  # an expired record too: it is gone anyway
        if paused:
            backend.limit_release(name)  # the jobs that met the pause: due now
        return paused

    def list(self) -> dict[str, dict[str, Any]]:
        """Every limit set and every pause running: name -> rate, concurrency, paused_for."""
        backend = self.backend()
        overrides, pauses = read(backend.kv_list(NAMESPACE))
        now = backend.now() if pauses else 0.0
        listed: dict[str, dict[str, Any]] = {}
        for name, value in sorted(overrides.items()):
            listed[name] = {**value.to_dict(), "paused_for": None}
        for name, until in sorted(pauses.items()):
            if until > now:
                entry = listed.setdefault(name, {"rate": None, "concurrency": None})
                entry["paused_for"] = round(until - now, 3)
        return listed

    def get(self, name: str) -> dict[str, Any] | None:
        return self.list().get(limit_name(name))


def pause(backend: Backend, name: str, seconds: float) -> float:
    """Store a pause of `name` for `seconds`; the store time it ends."""
    until = backend.now() + seconds
    backend.kv_put(NAMESPACE, PAUSE + name, repr(until).encode(), ttl=seconds)
    return until


def stored(backend: Backend, name: str) -> Override | None:
    """The limit set on `name` as stored, or None (none, or one that cannot be read)."""
    raw = backend.kv_get(NAMESPACE, SET + name)
    return read({SET + name: raw})[0].get(name) if raw is not None else None


def read(entries: dict[str, bytes]) -> tuple[dict[str, Override], dict[str, float]]:
    """The namespace's records as (name -> limit set, name -> store time its pause ends).
    A record that cannot be read (written by hand, or by a newer deferq) is skipped."""
    overrides: dict[str, Override] = {}
    pauses: dict[str, float] = {}
    for key, value in entries.items():
        kind, _, name = key.partition("|")
        try:
            if kind + "|" == SET:
                fields = orjson.loads(value)
                parsed = Override.parse(fields.get("rate"), fields.get("concurrency"))
                since = None if fields.get("since") is None else float(fields["since"])
                overrides[name] = Override(parsed.rate, parsed.concurrency, since)
            elif kind + "|" == PAUSE:
                pauses[name] = float(value)
        except (ValueError, TypeError, AttributeError):
            log.warning("limits: the stored record %r cannot be read; it is ignored", key)
    return overrides, pauses


class Known:
    """A worker's copy of the store's limits and pauses, read again at most once a second.
    Pauses are kept in this host's clock (the store's clock read with them)."""

    def __init__(self) -> None:
        self.overrides: dict[str, Override] = {}
        self.paused: dict[str, float] = {}  # name -> time.time() its pause ends
        self.offset = 0.0  # the store's clock less this host's, as last read (with pauses)
        self.reads = 0  # copies read so far: a job held on copy n may wait for what read n + 1 loosened
        self.loosened: set[str] = set()  # names loosened at a read, not yet given back (Limits.give_back)
        self.loosened_at: dict[str, int] = {}  # name -> the last read at which it loosened
        self.next_read = 0.0  # time.monotonic()
        self._reading = threading.Lock()
        # a store (or the shard keeping the limits) down: said once, and once when read again
        self._guard = StoreGuard(
            log, down="limits: the store's limits could not be read (%s); keeping the last ones",
            back="limits: read again after %.1fs", down_level=logging.WARNING)

    def loosened_after(self, read: int, names: Iterable[str]) -> bool:
        """Whether one of `names` loosened at a read after copy `read`."""
        return any(self.loosened_at.get(name, 0) > read for name in names)

    @property
    def empty(self) -> bool:
        return not self.overrides and not self.paused

    def refresh(self, backend_of: Callable[[], Backend]) -> None:
        """Read the store again when the copy is a second old: one thread reads, and the
        threads that start a job meanwhile wait for its answer (one store read, at most
        once a second), so no job starts on a copy older than that (a worker idle for a
        minute would otherwise start a burst on the minute-old one). A store that does
        not answer within a second leaves the waiting threads the copy as it was, and the
        next job asks again a second later."""
        if time.monotonic() < self.next_read or not self._reading.acquire(timeout=REFRESH):
            return
        try:
            if time.monotonic() < self.next_read:
                return  # read by another thread while this one waited
            backend = backend_of()  # only now: a fresh copy costs no store look-up
            overrides, pauses = read(backend.kv_list(NAMESPACE))
            offset = backend.now() - time.time() if pauses else 0.0
            paused = {name: until - offset for name, until in pauses.items()}
            loosened = self.loosened_since(overrides, paused) if self.reads else set()
            self.reads += 1
            self.loosened |= loosened
            self.loosened_at.update(dict.fromkeys(loosened, self.reads))
            self.overrides, self.offset, self.paused = overrides, offset, paused
        except Exception as exc:  # noqa: BLE001 - the copy stays; limits hold as they were
            self._guard.failed(exc)
        else:
            self._guard.succeeded()
        finally:
            self.next_read = time.monotonic() + REFRESH
            self._reading.release()

    def loosened_since(self, overrides: dict[str, Override], paused: dict[str, float]) -> set[str]:
        """The names whose rate differs in `overrides` from this copy's, or whose pause
        ends earlier in `paused`: a job this worker held on this copy may wait for nothing."""
        rates = {name for name, old in self.overrides.items()
                 if old.rate is not None and (overrides.get(name) or Override()).turns_of() != old.turns_of()}
        rates |= {name for name, new in overrides.items()
                  if new.rate is not None and name not in self.overrides}
        ended = {name for name, until in self.paused.items()
                 if paused.get(name, 0.0) < until - REFRESH and until > time.time()}
        return rates | ended

    def pause_left(self, names: Iterable[str]) -> tuple[float, str]:
        """Seconds until the latest pause of `names` ends (0: none), and its name."""
        if not self.paused:
            return 0.0, ""
        now = time.time()
        return max(((self.paused.get(name, now) - now, name) for name in names), default=(0.0, ""))

    def rate(self, keys: Iterable[str], task: str) -> tuple[Override | None, str | None]:
        """The rate set at run time that holds (None: the declared one), and the key its
        turns are kept under when it was set on one of `keys` (None: the task's own key).
        A rate set on the task changes the declared one, key template and all."""
        for key in keys:
            found = self.overrides.get(key)
            if found is not None and found.rate is not None:
                return found, key
        found = self.overrides.get(task)
        return (found if found is not None and found.rate is not None else None), None

    def concurrency(self, names: Iterable[str], declared: int | None) -> int | None:
        for name in names:
            found = self.overrides.get(name)
            if found is not None and found.concurrency is not None:
                return found.concurrency
        return declared
