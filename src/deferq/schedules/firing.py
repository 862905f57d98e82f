"""Firing schedules: the upkeep leader enqueues each due tick once.

One process at a time fires schedules: the upkeep leader (upkeep/leader.py), elected
through the store among the workers, `deferq run` masters and `deferq serve` processes,
steps a `Firer` beside its sweeps; if the leader dies, another takes over once its lease
has run out.

Only the leader fires, but being leader is not what makes a tick fire once: each tick
is claimed by moving the schedule's run record (``schedule-runs/NAME``) from the tick
before it to this one with a compare-and-set, naming the claiming process, so two
processes that both think they lead (a paused leader waking after its lease ran out)
still cannot enqueue one tick twice. The claim is written before the job and marked
done after it, with the job's unique key ``schedule:NAME:TICK``: a leader that dies in
between leaves the tick pending, and the next one takes the claim over (a
compare-and-set naming itself) and enqueues the job unless one with that key exists.

A leader frozen between its claim and the enqueue (a GC pause, a suspended VM) may
wake after the next one has enqueued that tick and its job has finished. So right
before it enqueues, the claimer reads the run record again and enqueues only while it
still holds the claim; and the job is enqueued with `unique_for` (TICK_MEMORY), so
that a job of the tick that succeeded answers for a late second one. What remains: a
leader frozen in the instant between that last read and the store's write, for longer
than its lease, while the tick's job ends other than succeeded (or is purged).

Missed runs: a tick is on time while it is found due within GRACE seconds of its time
(a leader handover stays well within it); on-time ticks always fire. Ticks older than
that came due while no process fired schedules, and the schedule's `missed` says what
happens to them: "skip" (default: none fire), "latest" (the newest fires, once) or
"all" (each fires, at most MISSED_LIMIT of them, the newest).
"""

from __future__ import annotations

import logging
import random
from collections import deque
from dataclasses import dataclass
from typing import Any

import orjson

from ..attempt.pauses import pause_at
from ..errors import ConfigError, DeferqError
from ..options import JobOptions
from ..task import AppLike, Call, Runtime
from .definition import PeriodicJob
from .store import RUNS, ScheduleInfo, Schedules, sealed_call
from .timing import local_time

log = logging.getLogger("deferq.schedules")

GRACE = 60.0  # seconds after its time a tick still counts as on time
MISSED_LIMIT = 100  # missed="all" fires at most this many missed ticks (the newest)
WINDOWS = (60.0, 3600.0, 86400.0, 31 * 86400.0, 366 * 86400.0)  # how far back missed ticks are looked for
BATCH = 100  # ticks claimed afresh in a round are enqueued this many at a time
TICK_MEMORY = 86400.0  # seconds a tick's succeeded job answers for a late second enqueue (if kept so long)
ROUND = 3.0  # seconds at most between two rounds: a schedule added or changed meanwhile is seen by then


def tick_key(name: str, tick: float) -> str:
    """The unique key of a tick's job: (schedule, tick time)."""
    return f"schedule:{name}:{tick:.3f}".rstrip("0").rstrip(".")


def due_ticks(schedule: PeriodicJob, after: float, now: float) -> list[float]:
    """The newest ticks in (after, now]: all of the last GRACE seconds and at least
    MISSED_LIMIT before them where there are so many (older ones are not looked for)."""
    timing = schedule.timing
    if timing.every is not None:
        first = timing.next_after(after)
        count = int((now - first) // timing.every) + 1 if first <= now else 0
        keep = min(count, MISSED_LIMIT + int(GRACE // timing.every) + 1)
        return [first + (count - keep + i) * timing.every for i in range(keep)]
    for window in (*WINDOWS, None):  # look back as little as finds enough ticks
        start = after if window is None else max(after, now - window)
        found: deque[float] = deque(maxlen=MISSED_LIMIT * 4)
        tick = timing.next_after(start)
        while tick <= now:
            found.append(tick)
            tick = timing.next_after(tick)
        if len(found) > MISSED_LIMIT * 2 or start == after:
            return list(found)
    raise AssertionError("unreachable")  # the last window reaches `after`


def to_fire(schedule: PeriodicJob, after: float, now: float) -> tuple[list[float], float | None]:
    """The ticks to fire now, and the newest one passed over (None: none was)."""
    ticks = due_ticks(schedule, after, now)
    late = [t for t in ticks if now - t > GRACE]
    on_time = ticks[len(late):]
    if schedule.missed == "all":
        fire = late[-MISSED_LIMIT:]
    elif schedule.missed == "latest":
        fire = late[-1:]
    else:
        fire = []
    skipped = late[-1] if late and late[-1] not in fire else None
    return fire + on_time, skipped


@dataclass(frozen=True)
class Claimed:
    """A tick this process claimed: its schedule, time and run record (as written)."""

    schedule: PeriodicJob
    tick: float
    run: bytes
    record: dict[str, Any]

    def call(self) -> Call:
        """The tick's job: its unique key (schedule, tick), kept TICK_MEMORY after it succeeds."""
        schedule = self.schedule
        delay = random.uniform(0, schedule.jitter) if schedule.jitter else 0.0
        options = JobOptions.parse(**schedule.options, key=tick_key(schedule.name, self.tick), delay=delay,
                                   unique_for=TICK_MEMORY)
        return Call(schedule.task, schedule.args, schedule.kwargs, options)


class Firer:
    """Fires the store's schedules; `step` is one round (the upkeep leader's, upkeep/service.py)."""

    def __init__(self, app: AppLike[object] | Runtime[object], holder: str) -> None:
        self.app, self.holder = app.runtime, holder  # the store, the settings, the enqueue pipeline
        self.schedules = Schedules(app)
        self.declared = False

    def declare(self) -> None:
        """Write the code's schedules to the store, once (every process does, at its start:
        the code's definition wins over a stored one of the same name)."""
        if not self.declared:
            self.schedules.declare(self.app.periodic_jobs)
            self.declared = True

    def step(self) -> float:
        """Declare the code's schedules (once), fire what is due; return the seconds until
        the next round. Store errors propagate (call again later)."""
        self.declare()
        now = self.app.backend.now()
        wait = ROUND
        batch: list[Claimed] = []
        for info in self.schedules.list():  # records that cannot be read are logged and left out
            if info.paused:
                continue
            try:
                self.fire_due(info, now, fresh=True, batch=batch)
                wait = min(wait, info.schedule.next_after(now) - now)
                if len(batch) >= BATCH:  # the first ticks go out while the others are claimed
                    self._enqueue_batch(batch)
                    batch = []
            except ConfigError as exc:  # one schedule's problem: the others fire
                log.warning("schedule %s is not fired: %s", info.name, exc)
            except (DeferqError, OSError):
                raise  # the store: the next round tries again
            except Exception:
                log.exception("schedule %s: firing failed; the other schedules fire", info.name)
        self._enqueue_batch(batch)
        return max(0.01, wait)

    def _enqueue_batch(self, batch: list[Claimed]) -> None:
        """Enqueue the ticks this round claimed afresh, in one call (1,000 schedules due at
        once cost one enqueue, not 1,000), each only while its claim is still this
        process's; then mark each done. If the call fails, the claims stay pending and
        the next round enqueues each alone (`_finish`), so one bad schedule holds up none."""
        if not batch:
            return
        backend = self.app.backend
        pause_at("schedule.enqueue")
        runs = backend.kv_list(RUNS)  # claims taken over meanwhile (this process froze) are left
        batch = [claimed for claimed in batch if runs.get(claimed.schedule.name) == claimed.run]
        try:
            jobs = self.app.enqueue_many([claimed.call() for claimed in batch])
        except (ConfigError, ValueError, TypeError) as exc:
            log.warning("schedules: enqueueing %d ticks at once failed (%s); each goes alone next round",
                        len(batch), exc)
            return
        for claimed, job in zip(batch, jobs, strict=True):
            schedule = claimed.schedule
            log.info("schedule %s: enqueued the %s tick", schedule.name, local_time(claimed.tick, schedule.tz))
            done = orjson.dumps({**claimed.record, "done": True, "job": job.id, "fired": claimed.tick})
            backend.kv_swap(RUNS, schedule.name, claimed.run, done)

    def fire_due(self, info: ScheduleInfo, now: float, fresh: bool = False,
                 batch: list[Claimed] | None = None) -> int:
        """Enqueue the due ticks of one schedule that this process claims; how many.
        `fresh`: `info.run` was read just now (a round's listing), not read again: every
        write is a compare-and-set against it, so a stale one only loses its race.
        `batch`: a lone tick claimed afresh is added to it, for `_enqueue_batch`."""
        backend, name = self.app.backend, info.name
        if sealed_call(info.schedule) is not None:
            raise ConfigError("its arguments are encrypted and this process cannot open them: give it the "
                              "encryption keys (DEFERQ_ENCRYPTION_KEYS)")
        run = info.run if fresh else backend.kv_get(RUNS, name)
        record = orjson.loads(run) if run else {}
        if run is not None and not record.get("done"):  # a leader died (or froze) between claim and job
            if record.get("by") != self.holder:  # take the claim over: that leader can no longer enqueue it
                taken = orjson.dumps({**record, "by": self.holder})
                if not backend.kv_swap(RUNS, name, run, taken):
                    return 0  # the record moved on meanwhile: the next step reads it again
                run, record = taken, orjson.loads(taken)
            run = self._finish(info.schedule, run, record)
            if run is None:
                return 0  # the record moved on meanwhile: the next step reads it again
            record = orjson.loads(run)
        after = max(info.since, record.get("tick", info.since))
        fire, skipped = to_fire(info.schedule, after, now)
        if skipped is not None:
            log.info("schedule %s: missed ticks up to %s skipped (missed=%s)", name,
                     local_time(skipped, info.schedule.tz), info.schedule.missed)
        steps = [(tick, True) for tick in fire] or ([(skipped, False)] if skipped is not None else [])
        fired = 0
        for tick, enqueue in steps:  # each tick claimed by moving the run record on to it
            claim = orjson.dumps({**record, "tick": tick, "done": not enqueue, "by": self.holder})
            won = (backend.kv_put(RUNS, name, claim, only_new=True) if run is None
                   else backend.kv_swap(RUNS, name, run, claim))
            if not won:
                return fired  # another process moved this schedule on: it fires the rest
            run, record = claim, orjson.loads(claim)
            if enqueue:
                pause_at("schedule.claim")
                fired += 1
                if batch is not None and len(steps) == 1:  # no job can hold a tick just claimed
                    batch.append(Claimed(info.schedule, tick, run, record))
                    return fired
                done = self._finish(info.schedule, run, record)
                if done is None:
                    return fired  # the record moved on meanwhile: the next step reads it again
                run, record = done, orjson.loads(done)
        return fired

    def _finish(self, schedule: PeriodicJob, run: bytes, record: dict[str, Any]) -> bytes | None:
        """Enqueue the claimed tick's job (unless one with its key exists) and mark it done;
        the record as marked, or None if it had moved on (it is never moved back)."""
        tick = float(record["tick"])
        key = tick_key(schedule.name, tick)
        job = self.app.backend.get_by_key(key)
        if job is None:
            pause_at("schedule.enqueue")
            if self.app.backend.kv_get(RUNS, schedule.name) != run:
                return None  # another leader took the claim over (this one froze): it enqueues the job
            job = self.app.enqueue_many([Claimed(schedule, tick, run, record).call()])[0]
            log.info("schedule %s: enqueued the %s tick", schedule.name, local_time(tick, schedule.tz))
        done = orjson.dumps({**record, "done": True, "job": job.id, "fired": tick})
        return done if self.app.backend.kv_swap(RUNS, schedule.name, run, done) else None
