"""Schedules as data: kept in the store, so they are added, changed, paused, resumed
and removed while every process runs (`app.schedules`, `deferq schedule`, the HTTP API).

Two records per schedule, in the store's small records (`kv_*`):

- ``schedules/NAME``: its definition (definition.py), whether it is paused, where it
  came from ("code", "config" or "api") and `since`, the moment it began counting
  ticks (set when it is added, when its timing changes and when it is resumed);
- ``schedule-runs/NAME``: the last tick dealt with and the last job enqueued,
  ``{"tick": T, "done": true, "job": id, "fired": T}``, moved on only by
  compare-and-set (firing.py), so each tick is claimed once.

Schedules declared in code (and in the supervisor's config file) are written at each
process's start (`declare`): the code's definition wins over a stored one of the same
name; its paused state and last run are kept.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from ..encryption.envelope import Unreadable, size_of
from ..encryption.jobs import Sealer, hidden, sealed_result
from ..errors import ConfigError
from ..job import Job
from ..options import JobOptions
from ..task import AppLike, Call, Runtime
from ..values import storable
from .definition import JOB_OPTIONS, PeriodicJob, make_schedule
from .timing import Timing

log = logging.getLogger("deferq.schedules")

SCHEDULES, RUNS = "schedules", "schedule-runs"
SOURCES = ("code", "config", "api")
# The record's format: 2 reads a six-field cron seconds first. A record without it was
# written when six fields meant seconds last, and is read with its last field first.
FORMAT = 2


@dataclass(frozen=True)
class ScheduleInfo:
    """A stored schedule: its definition, state and last run."""

    schedule: PeriodicJob
    paused: bool
    source: str
    since: float
    last_tick: float | None = None
    last_job: str | None = None
    run: bytes | None = field(default=None, compare=False, repr=False)  # the run record as read
    was_sealed: bool = field(default=False, compare=False)  # its arguments were stored encrypted (opened here)

    @property
    def name(self) -> str:
        return self.schedule.name

    def upcoming(self, now: float, count: int = 5) -> list[float]:
        """The next `count` ticks after `now` (none while paused)."""
        return [] if self.paused else self.schedule.timing.upcoming(now, count)

    def to_dict(self, now: float) -> dict[str, Any]:
        """As the API and `deferq schedule` show it: arguments this process cannot open as
        none, `encrypted` giving their size ({"args": N}; None when they are shown)."""
        sealed = sealed_call(self.schedule)
        definition = self.schedule.to_dict()
        if sealed is not None:
            definition.update(args=[], kwargs={})
        return {**definition, "paused": self.paused, "source": self.source, "since": self.since,
                "last_tick": self.last_tick, "last_job": self.last_job,
                "next": self.upcoming(now), "timing": self.schedule.timing.label(),
                "described": f"{self.schedule.timing.label()}: paused" if self.paused
                else self.schedule.timing.describe(now),
                "encrypted": None if sealed is None else {"args": size_of(sealed)}}

    def record(self, sealer: Sealer | None = None) -> bytes:
        """The stored record: the arguments sealed when `sealer` seals the schedule's task
        (and they are not sealed already: a process without the key pauses a schedule)."""
        definition = self.schedule.to_dict()
        if sealer is not None and sealer.wants(self.schedule.task) and sealed_call(self.schedule) is None:
            definition.update(args=[], kwargs=sealer.seal_value([definition["args"], definition["kwargs"]],
                                                               schedule_bound(self.name)))
        return orjson.dumps({"schedule": definition, "paused": self.paused,
                             "source": self.source, "since": self.since, "format": FORMAT})


def schedule_bound(name: str) -> bytes:
    """The associated data of a schedule's sealed arguments: its name (a job id holds no
    tab, so never a job's)."""
    return f"schedule\t{name}/args".encode()


def sealed_call(schedule: PeriodicJob) -> str | None:
    """The sealed text of a schedule's arguments as stored (kwargs `{"$enc": ...}`), else None."""
    return None if schedule.args else sealed_result(schedule.kwargs)


def opened(info: ScheduleInfo, sealer: Sealer | None) -> ScheduleInfo:
    """`info` with its sealed arguments opened where this process holds the key; else as
    it is (shown as "encrypted (N bytes)", not fired)."""
    sealed = sealed_call(info.schedule)
    if sealed is None or sealer is None or sealer.keyring is None:
        return info
    try:
        call = sealer.open_value(info.schedule.kwargs, schedule_bound(info.name),
                                 f"the arguments of schedule {info.name!r}")
        args, kwargs = call
        schedule = replace(info.schedule, args=tuple(args), kwargs=dict(kwargs))
    except (Unreadable, ValueError, TypeError) as exc:
        log.warning("schedule %s: %s", info.name, exc if isinstance(exc, Unreadable) else
                    f"its arguments decrypt to no [args, kwargs] ({hidden(sealed)})")
        return info
    return replace(info, schedule=schedule, was_sealed=True)


def read_info(value: bytes, run: bytes | None) -> ScheduleInfo:
    """A stored schedule; ConfigError (one sentence) when its record cannot be read."""
    try:
        data = orjson.loads(value)
        last = orjson.loads(run) if run else {}
        definition = dict(data["schedule"])
        cron = definition.get("cron")
        if data.get("format", 1) < FORMAT and isinstance(cron, str) and len(cron.split()) == 6:
            fields = cron.split()  # written when six fields meant seconds last: the same ticks, seconds first
            definition["cron"] = " ".join([fields[-1], *fields[:-1]])
        return ScheduleInfo(PeriodicJob.from_dict(definition), bool(data.get("paused")),
                            str(data.get("source", "api")), float(data.get("since", 0.0)),
                            last.get("fired"), last.get("job"), run)
    except ConfigError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # not written by this deferq
        raise ConfigError(f"its record is not a schedule this deferq reads ({type(exc).__name__}: {exc})"
                          ) from None


def read_named(name: str, value: bytes, run: bytes | None) -> ScheduleInfo:
    """`read_info` of the schedule `name`, its sentence naming it."""
    try:
        return read_info(value, run)
    except ConfigError as exc:
        raise ConfigError(f"schedule {name!r} is stored but cannot be fired: {exc}; put it again or remove it"
                          ) from None


@dataclass(frozen=True)
class Broken:
    """A stored record that is not a schedule this deferq can fire, and why."""

    name: str
    problem: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "problem": self.problem}


def call_options(call: Call, name: str) -> dict[str, Any]:
    """The options of `task.call(...)` a schedule's job keeps; others are refused."""
    chosen, default = {}, JobOptions()
    for option in JobOptions.__dataclass_fields__:
        value = getattr(call.options, option)
        if value == getattr(default, option):
            continue
        if option not in JOB_OPTIONS:
            raise ConfigError(f"schedule {name!r}: a schedule's job cannot set {option!r}; "
                              f"it takes {', '.join(JOB_OPTIONS)}")
        if option == "expires":
            if value.within is None:
                raise ConfigError(f"schedule {name!r}: expires must be seconds after each tick, not a time")
            value = value.within
        chosen[option] = value
    return chosen


class Schedules:
    """``app.schedules``: the store's schedules, managed at run time."""

    def __init__(self, app: AppLike[object] | Runtime[object]) -> None:
        self.app = app.runtime  # the store, the tasks, the settings, the enqueue pipeline
        self.sealer: Sealer | None = self.app.chain.sealer  # seals the arguments of encrypted tasks' schedules

    # -- reading ---------------------------------------------------------------------

    def list(self) -> list[ScheduleInfo]:
        """Every stored schedule; one whose record cannot be read is left out, and logged."""
        return self.scan()[0]

    def scan(self) -> tuple[builtins.list[ScheduleInfo], builtins.list[Broken]]:
        """Every stored schedule, and the records that cannot be read as one (each logged):
        one bad record (written by hand, or by another version) hides nothing else."""
        backend = self.app.backend
        stored, runs = backend.kv_list(SCHEDULES), backend.kv_list(RUNS)
        found, broken = [], []
        for name, value in sorted(stored.items()):
            try:
                found.append(opened(read_info(value, runs.get(name)), self.sealer))
            except ConfigError as exc:
                log.warning("schedule %s is left out: %s", name, exc)
                broken.append(Broken(name, str(exc)))
        return found, broken

    def get(self, name: str) -> ScheduleInfo | None:
        """The schedule named, None if there is none; ConfigError if its record cannot be read."""
        if not storable(name):  # no store holds such a name (a lone surrogate has no UTF-8)
            return None
        value = self.app.backend.kv_get(SCHEDULES, name)
        if value is None:
            return None
        return opened(read_named(name, value, self.app.backend.kv_get(RUNS, name)), self.sealer)

    def __getitem__(self, name: str) -> ScheduleInfo:
        found = self.get(name)
        if found is None:
            raise KeyError(f"no schedule named {name!r}")
        return found

    # -- changing --------------------------------------------------------------------

    def add(self, name: str, call: Call, *, cron: str | None = None, every: Any = None, tz: str | None = None,
            jitter: Any = 0.0, missed: str = "skip") -> ScheduleInfo:
        """Add a schedule enqueueing `call` (``task.call(...)``); one of the same name is
        changed (its paused state and last run kept). Fires without a restart."""
        if not isinstance(call, Call):
            raise ConfigError(f"schedule {name!r}: pass the job as task.call(...), got {call!r:.60}")
        schedule = make_schedule(name, call.task, call.args, call.kwargs, cron=cron, every=every, tz=tz,
                                 jitter=jitter, missed=missed, **call_options(call, name))
        return self.put(schedule, "api")

    def put(self, schedule: PeriodicJob, source: str) -> ScheduleInfo:
        """Store `schedule` as is (the HTTP API and `declare` come here)."""
        own = [name for name in self.app.tasks if not name.startswith("deferq.")]
        if own and schedule.task not in self.app.tasks:  # an app without tasks of its own cannot tell
            raise ConfigError(f"schedule {schedule.name!r} names the task {schedule.task!r}, which the app "
                              "does not have")
        task = self.app.tasks.get(schedule.task)
        if task is not None and "queue" not in schedule.options:  # the leader may not know the task
            schedule = replace(schedule, options={**schedule.options, "queue": task.defaults.queue})
        try:
            old = self.get(schedule.name)
        except ConfigError:  # a record that cannot be read is replaced
            old = None
        now = self.app.backend.now()
        since = now
        if old is not None and old.schedule.timing == schedule.timing:
            since = old.since  # only a change of timing starts the count again
        info = ScheduleInfo(schedule, old.paused if old else False, source, since,
                            old.last_tick if old else None, old.last_job if old else None)
        unsealed = (old is not None and self.sealer is not None and self.sealer.wants(schedule.task)
                    and not old.was_sealed)  # stored before its task was encrypted
        if old is None or old.schedule != schedule or old.source != source or old.since != since or unsealed:
            self.app.backend.kv_put(SCHEDULES, schedule.name, info.record(self.sealer))
        return info

    def declare(self, schedules: Sequence[PeriodicJob], source: str = "code") -> None:
        """Write the schedules declared in code (or the config file): the declaration wins."""
        for schedule in schedules:
            self.put(schedule, source)

    def pause(self, name: str) -> bool:
        """Stop firing `name`; False if it was paused already."""
        return self._set_paused(name, True)

    def resume(self, name: str) -> bool:
        """Fire `name` again from now (the ticks it was paused for are not missed runs)."""
        return self._set_paused(name, False)

    def _set_paused(self, name: str, paused: bool) -> bool:
        backend = self.app.backend
        for _ in range(10):  # a compare-and-set: an edit in between is kept
            value = backend.kv_get(SCHEDULES, name) if storable(name) else None
            if value is None:
                raise KeyError(f"no schedule named {name!r}")
            info = read_named(name, value, None)
            if info.paused == paused:
                return False
            since = info.since if paused else backend.now()
            changed = ScheduleInfo(info.schedule, paused, info.source, since)  # its arguments as stored
            if backend.kv_swap(SCHEDULES, name, value, changed.record()):
                return True
        raise ConfigError(f"schedule {name!r} kept changing while it was being paused or resumed; try again")

    def remove(self, name: str) -> bool:
        """Delete a schedule and its last run; False if there was none. (A schedule
        still declared in code comes back at the next start.)"""
        if not storable(name):
            return False
        removed = self.app.backend.kv_delete(SCHEDULES, name)
        self.app.backend.kv_delete(RUNS, name)
        return removed

    def run_now(self, name: str) -> Job:
        """Enqueue the schedule's job now, outside its ticks (its last run is unchanged)."""
        schedule = self[name].schedule
        if sealed_call(schedule) is not None:
            raise ConfigError(f"schedule {name!r}: its arguments are encrypted and this process cannot open them: "
                              "give it the encryption keys (DEFERQ_ENCRYPTION_KEYS)")
        jobs = self.app.enqueue_many([Call(schedule.task, schedule.args, schedule.kwargs,
                                           JobOptions.parse(**schedule.options))])
        return jobs[0]


def check_timing(cron: str | None, every: Any, tz: str | None) -> Timing:
    """A schedule's timing checked on its own (the CLI's and the API's first check)."""
    return make_schedule("check", "check", cron=cron, every=every, tz=tz).timing
